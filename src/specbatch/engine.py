"""The offline vLLM engine: built once from the config, then asked to generate batches of prompts.

Everything vLLM-specific about *running* lives here: the ``LLM`` arguments (including ``speculative_config`` and
per-request spec metrics), the CPU environment, warm-up, and counter snapshots around each generate call.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass
from typing import Any

from specbatch.config import JobConfig, SamplingConfig, SpecMethod, to_plain_dict
from specbatch.prompts import Prompt
from specbatch.reaper import Reaper
from specbatch.spec_metrics import Counters

log = logging.getLogger(__name__)

# Sections of the config an engine is built from; a shared engine may only serve jobs that agree on them.
ENGINE_KEYS = ("model", "spec", "engine")


def engine_fingerprint(job: JobConfig) -> str:
    plain = to_plain_dict(job)
    return hashlib.sha256(json.dumps({k: plain[k] for k in ENGINE_KEYS}, sort_keys=True).encode()).hexdigest()


def llm_kwargs(job: JobConfig) -> dict[str, Any]:
    """Arguments of ``vllm.LLM`` for this job (pure: tests check GPU presets with it without loading anything)."""
    model, engine, spec = job.model, job.engine, job.spec
    kwargs: dict[str, Any] = {
        "model": model.path,
        "tokenizer": model.tokenizer,
        "revision": model.revision,
        "dtype": model.dtype.value,
        "max_model_len": model.max_model_len,
        "trust_remote_code": model.trust_remote_code,
        "tensor_parallel_size": model.tensor_parallel_size,
        "enforce_eager": engine.enforce_eager,
        "seed": engine.seed,
        # Counters for the summary: vLLM only keeps them (and get_metrics only works) with stats on.
        "disable_log_stats": False,
    }
    speculative = spec.to_vllm()
    if speculative is not None:
        kwargs["speculative_config"] = speculative
        # Per-row figures; vLLM refuses this option without a speculative_config.
        kwargs["per_request_spec_decode_metrics"] = "summary"
    if engine.gpu_memory_utilization is not None:
        kwargs["gpu_memory_utilization"] = engine.gpu_memory_utilization
    if engine.max_num_seqs is not None:
        kwargs["max_num_seqs"] = engine.max_num_seqs
    return {k: v for k, v in kwargs.items() if v is not None}


def sampling_params(cfg: SamplingConfig) -> Any:
    from vllm import SamplingParams

    return SamplingParams(
        n=cfg.n,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        top_k=cfg.top_k,
        max_tokens=cfg.max_tokens,
        seed=cfg.seed,
    )


@dataclass
class Generation:
    """Outputs of one generate call with the counter differences and wall time around it."""

    outputs: list[Any]
    counters: Counters
    seconds: float


class Engine:
    """One ``vllm.LLM``; start-up and warm-up times are kept apart from generation time."""

    def __init__(self, llm: Any, fingerprint: str, startup_seconds: float, reaper: Reaper | None = None) -> None:
        self.llm = llm
        self.fingerprint = fingerprint
        self.startup_seconds = startup_seconds
        self.warmup_seconds = 0.0
        # Ends vLLM's processes if this job dies without close() (kill -9); see specbatch.reaper.
        self.reaper = reaper

    @classmethod
    def start(cls, job: JobConfig) -> Engine:
        if job.engine.cpu_kvcache_space_gib is not None:
            # The CPU worker refuses to start without it; an explicit environment value wins.
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(job.engine.cpu_kvcache_space_gib))
        if job.spec.method is SpecMethod.suffix:
            # arctic-inference's vLLM plugin must stay inert: we only use its suffix tree through vLLM.
            os.environ.setdefault("ARCTIC_INFERENCE_ENABLED", "0")
        from vllm import LLM

        kwargs = llm_kwargs(job)
        log.info("starting vLLM: model=%s spec=%s", job.model.path, kwargs.get("speculative_config"))
        began = time.perf_counter()
        # Before the LLM: a kill during the start-up (tens of seconds) would leave its processes as well.
        reaper = Reaper.start()
        try:
            llm = LLM(**kwargs)
        except BaseException:
            # vLLM ends the processes of an engine that failed to start.
            if reaper:
                reaper.stop()
            raise
        engine = cls(llm, engine_fingerprint(job), time.perf_counter() - began, reaper)
        log.info("engine ready in %.1f s", engine.startup_seconds)
        if job.engine.warmup:
            try:
                engine.warmup()
            except BaseException:
                engine.close()
                raise
        return engine

    def warmup(self) -> None:
        """One short request, so one-off costs (numba JIT for n-gram, first kernels) stay out of the timings."""
        from vllm import SamplingParams

        began = time.perf_counter()
        self.llm.generate(
            [{"prompt_token_ids": [1, 2, 3, 4, 5, 6, 7, 8]}], SamplingParams(max_tokens=8), use_tqdm=False
        )
        self.warmup_seconds = time.perf_counter() - began

    def counters(self) -> Counters:
        return Counters.from_metrics(self.llm.get_metrics())

    def generate(self, prompts: list[Prompt], params: Any) -> Generation:
        """Generate all prompts in one call (vLLM batches them); outputs come back in prompt order."""
        before = self.counters()
        began = time.perf_counter()
        outputs = self.llm.generate([{"prompt_token_ids": p.token_ids} for p in prompts], params, use_tqdm=True)
        seconds = time.perf_counter() - began
        return Generation(outputs=list(outputs), counters=self.counters() - before, seconds=seconds)

    def close(self) -> None:
        """Stop the engine's worker processes now rather than at interpreter exit."""
        llm, self.llm = self.llm, None
        if llm is None:
            return
        # vLLM 0.32's LLM has no close(); its engine-core client owns the worker processes.
        core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        if callable(getattr(core, "shutdown", None)):
            core.shutdown()
        del llm
        # Only once vLLM's shutdown (which joins, and if need be kills, its processes) went through: if it raised,
        # the reaper stays and ends whatever is left when this process exits.
        reaper, self.reaper = self.reaper, None
        if reaper:
            reaper.stop()
