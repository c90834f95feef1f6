"""The job in vLLM's terms: the arguments of ``vllm.LLM`` (and so of ``vllm serve``), the environment vLLM reads, and
vLLM's own rules about the job, which it would otherwise break only once the model is loading.

Pure: nothing here imports vLLM, so config tests check GPU presets with these functions on any machine. The offline
backend (``specbatch.backends.vllm.vllm_offline``) and the serve commands (``specbatch.backends.vllm.serve_commands``)
both take their arguments from here, so what is served is what the job measures.
"""

from __future__ import annotations

import enum
import os
from typing import Any

from specbatch.backends.vllm import vllm_options
from specbatch.backends.vllm.methods import environment, vllm_method
from specbatch.backends.vllm.simulate_carrier import COVERAGE_ENV
from specbatch.common.errors import require
from specbatch.common.machine import this_machine
from specbatch.config import ConfigError, JobConfig, SpecConfig
from specbatch.config.spec import knob_owners, schedule_must_cover
from specbatch.methods import SpecMethod

# What set_engine_environment set in os.environ for an earlier offline engine of this process, so a later engine of
# another kind undoes it, and a server tells it from what the user exported.
_SET_FOR_ENGINES: dict[str, str] = {}
# Variables the offline engine decides per engine, whatever an earlier engine of this process set.
_PER_ENGINE = ("VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_CPU_OMP_THREADS_BIND", "VLLM_RPC_BASE_PATH", COVERAGE_ENV)


def set_engine_environment(variables: dict[str, str]) -> None:
    """Set an offline engine's variables in os.environ: a value the user exported wins, except that
    engine.multiprocessing decides one process or several; what an earlier engine of this process set is undone."""
    for name in _PER_ENGINE:
        if name in _SET_FOR_ENGINES and os.environ.get(name) == _SET_FOR_ENGINES.pop(name):
            del os.environ[name]
    for name, value in variables.items():
        if name == "VLLM_ENABLE_V1_MULTIPROCESSING" or name not in os.environ:
            os.environ[name] = value
            _SET_FOR_ENGINES[name] = value


def ipc_path_chosen_by_user() -> bool:
    """Whether the user exported VLLM_RPC_BASE_PATH (rather than an earlier engine of this process setting it)."""
    return "VLLM_RPC_BASE_PATH" in os.environ and "VLLM_RPC_BASE_PATH" not in _SET_FOR_ENGINES


def use_ipc_dir(path: str) -> None:
    """Point this process's engine's IPC sockets (VLLM_RPC_BASE_PATH) at ``path``, unless the user chose where."""
    if not ipc_path_chosen_by_user():
        os.environ["VLLM_RPC_BASE_PATH"] = path
        _SET_FOR_ENGINES["VLLM_RPC_BASE_PATH"] = path


def speculative_config(spec: SpecConfig) -> dict[str, Any] | None:
    """The ``speculative_config`` dict for ``vllm.LLM``; None for the baseline."""
    if spec.method is SpecMethod.none:
        return None
    if spec.method is SpecMethod.auto:
        # Never an engine's set-up: each phase of a spec=auto job runs one of its candidates (specbatch.auto).
        raise ConfigError(
            "spec=auto is not one set-up to serve: it chooses one per run. Run it (python jobs/generate.py "
            "spec=auto ...), then serve what its decision.json names under overrides, e.g. python jobs/serve.py "
            "spec=ngram spec.num_speculative_tokens=3"
        )
    row = vllm_method(spec.method)
    assert row is not None  # the roles returned above
    out: dict[str, Any] = {"method": row.name, "num_speculative_tokens": spec.k, **row.fixed}
    for knob, owners in knob_owners().items():
        value = getattr(spec, knob)
        if spec.method in owners and value is not None and knob not in row.ours:
            out[knob] = value.value if isinstance(value, enum.Enum) else value
    if spec.k_schedule is not None:
        # vLLM's scheduler looks the k up by the number of requests in each step (dynamic speculative decoding).
        out["num_speculative_tokens_per_batch_size"] = [list(entry) for entry in spec.k_schedule]
    return out


def llm_kwargs(job: JobConfig) -> dict[str, Any]:
    """Arguments of ``vllm.LLM`` for this job (pure: tests check GPU presets with it without loading anything)."""
    model, engine, options = job.model, job.engine, vllm_options(job)
    kwargs: dict[str, Any] = {
        "model": model.path,
        "tokenizer": model.tokenizer,
        "revision": model.revision,
        "dtype": model.dtype.value,
        "max_model_len": model.max_model_len,
        "trust_remote_code": model.trust_remote_code,
        "tensor_parallel_size": model.tensor_parallel_size,
        "enforce_eager": options.enforce_eager,
        "seed": engine.seed,
        # Counters for the summary: vLLM only keeps them (and get_metrics only works) with stats on.
        "disable_log_stats": False,
    }
    speculative = speculative_config(job.spec)
    if speculative is not None:
        kwargs["speculative_config"] = speculative
        # Per-row figures; vLLM refuses this option without a speculative_config.
        kwargs["per_request_spec_decode_metrics"] = "summary"
    if options.gpu_memory_utilization is not None:
        kwargs["gpu_memory_utilization"] = options.gpu_memory_utilization
    if engine.max_num_seqs is not None:
        kwargs["max_num_seqs"] = engine.max_num_seqs
    if seeded_prefills_must_stay_whole(job):
        kwargs["enable_chunked_prefill"] = False
    return {k: v for k, v in kwargs.items() if v is not None}


def older_runner_reasons(spec: SpecConfig) -> list[str]:
    """What in this set-up makes vLLM 0.32 run its older (V1) model runner on any machine
    (VllmConfig._get_v2_model_runner_unsupported_features in vllm/config/vllm.py)."""
    reasons = []
    if spec.method in (SpecMethod.suffix, SpecMethod.medusa):
        reasons.append(f"spec={spec.method.value}")
    if spec.parallel_drafting and spec.method in (SpecMethod.eagle, SpecMethod.eagle3):
        reasons.append("spec.parallel_drafting=true with EAGLE heads")
    if spec.use_heterogeneous_vocab:
        reasons.append("spec.use_heterogeneous_vocab=true")
    return reasons


def block_verification_must_run(spec: SpecConfig) -> None:
    """Block verification where vLLM would verify token by token instead, silently: its older (V1) model runner's
    rejection sampler (vllm/v1/sample/rejection_sampler.py) knows standard and synthetic only; block is in the newer
    runner's (vllm/v1/worker/gpu/spec_decode/rejection_sampler.py)."""
    if spec.rejection_sample_method is None or spec.rejection_sample_method.value != "block":
        return
    reasons = older_runner_reasons(spec)
    if reasons:
        raise ConfigError(
            f"spec.rejection_sample_method=block with {' and '.join(reasons)}: vLLM 0.32 runs that on its older "
            "model runner, which verifies token by token whatever this says; drop spec.rejection_sample_method to "
            "measure what runs"
        )


def seeded_prefills_must_stay_whole(job: JobConfig) -> bool:
    """Whether vLLM must prefill each prompt in one step: a seeded sampled job on a machine without a GPU.

    vLLM 0.32 rewinds a seeded request's random generator after a step that prefilled only part of its prompt
    (``gpu_model_runner._bookkeeping_sync``: ``gen.set_offset``), which only CUDA generators have: on its CPU build
    the first split prefill ends the engine with "CPU Generator does not use offset". Prompts are split when a step's
    token budget (max_num_batched_tokens) runs out mid-prompt, i.e. at any batch of more than a few rows. Without
    chunked prefill a prompt that does not fit waits for the next step whole; greedy requests have no generator."""
    sampling = job.sampling
    seeded = sampling.seed is not None and sampling.temperature > 0
    return seeded and not this_machine().gpu_count


def vllm_environment(job: JobConfig) -> dict[str, str]:
    """Environment variables vLLM needs for this job: the CPU KV cache (the CPU worker refuses to start without
    one) and what vLLM's table of methods asks for (specbatch.backends.vllm.methods). The offline engine and the server
    jobs/serve.py starts both set them from here, so the two cannot drift; an explicit environment value wins."""
    env: dict[str, str] = {}
    space = vllm_options(job).cpu_kvcache_space_gib
    if space is not None:
        env["VLLM_CPU_KVCACHE_SPACE"] = str(space)
    return env | environment(job.spec)


def runs_in_process(job: JobConfig) -> bool:
    """Whether vLLM's engine core and worker run inside the job's process (engine.multiprocessing; null: on a machine
    without a GPU, with one worker)."""
    choice = vllm_options(job).multiprocessing
    if choice is None:
        return not this_machine().gpu_count and job.model.tensor_parallel_size == 1
    return not choice


def offline_environment(job: JobConfig) -> dict[str, str]:
    """What the offline engine sets beside :func:`vllm_environment` (never the server's, whose API process needs
    its engine in a process of its own).

    In one process (runs_in_process): measured on 2-core machines (AVX2 and AVX-512 alike), the engine core's and
    worker's spawned processes cost 20-40 s of re-importing torch and vLLM at every start, and their IPC on two
    shared cores costs a third of the throughput; one process gives the same tokens. Its OpenMP threads are left
    unbound there: binding pins the job's own main thread (and every process it starts after) to one core."""
    if not runs_in_process(job):
        return {"VLLM_ENABLE_V1_MULTIPROCESSING": "1"}
    return {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}


def largest_batch(job: JobConfig) -> tuple[int, str]:
    """The most requests the engine may run at once, and a phrase saying where that comes from:
    engine.max_num_seqs, or vLLM 0.32's default when it is null (EngineArgs.get_batch_defaults: 256 per worker
    on its CPU build; on GPUs 256, or 1024 with 70 GiB or more, so 1024 covers every GPU; the OpenAI server's
    own defaults are lower, 128 per worker on CPU)."""
    engine = job.engine
    if engine.max_num_seqs is not None:
        return engine.max_num_seqs, f"engine.max_num_seqs={engine.max_num_seqs} lets the engine run that many"
    if vllm_options(job).gpu_memory_utilization is None:
        workers = job.model.tensor_parallel_size
        return 256 * workers, (
            f"engine.max_num_seqs is null, so vLLM's CPU build runs up to {256 * workers} requests at once "
            "(its default: 256 per worker)"
        )
    return 1024, "engine.max_num_seqs is null, so vLLM runs up to 1024 requests at once on a large GPU"


def check_vllm_rules(job: JobConfig) -> None:
    """What vLLM 0.32 refuses, or runs differently from what the config says, about this job's processes, batch and
    drafter placement; ConfigError naming the key to change."""
    spec, model = job.spec, job.model
    vllm_method(spec.method)  # one vLLM runs, or one line naming those it does
    require(
        vllm_options(job).multiprocessing is not False or model.tensor_parallel_size == 1,
        f"engine.multiprocessing=false runs vLLM in the job's process, which holds one worker, but "
        f"model.tensor_parallel_size={model.tensor_parallel_size} needs one per GPU: set "
        "engine.multiprocessing=true (or null)",
    )
    if spec.schedule is not None:
        batch, why = largest_batch(job)
        schedule_must_cover(spec.schedule, batch, why)
    block_verification_must_run(spec)
    draft_tp, target_tp = spec.draft_tensor_parallel_size, model.tensor_parallel_size
    if spec.parallel_drafting and draft_tp not in (None, target_tp):
        # vLLM 0.32's newer model runner has no parallel drafting, so it falls back to the older one, whose
        # drafter runs on exactly the target's GPUs (vllm/config/vllm.py, v1/spec_decode/draft_model.py).
        raise ConfigError(
            f"spec.draft_tensor_parallel_size={draft_tp} with spec.parallel_drafting=true and "
            f"model.tensor_parallel_size={target_tp}: vLLM 0.32 runs parallel drafting on its older model runner, "
            f"where the drafter runs on as many GPUs as the target: set spec.draft_tensor_parallel_size="
            f"{target_tp} or drop it"
        )
    if draft_tp is not None:
        row = vllm_method(spec.method)
        follows = row is not None and row.draft_tp_follows_target
        allowed = [target_tp] if follows else sorted({1, target_tp})
        require(
            draft_tp in allowed,
            f"spec.draft_tensor_parallel_size={draft_tp} with model.tensor_parallel_size={target_tp}: "
            f"vLLM runs spec={spec.method.value} drafts only on {' or '.join(map(str, allowed))} GPU(s); "
            f"set spec.draft_tensor_parallel_size={allowed[0]} or drop it",
        )
