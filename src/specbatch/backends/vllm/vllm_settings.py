"""The settings that change acceptance (specbatch.engine.acceptance_settings), as a started ``vllm.LLM`` resolved them.

What this module knows: vLLM 0.32's resolved ``VllmConfig`` (read in the job's process) and its workers' attention
groups (asked through ``LLM.collective_rpc``, so it works with the engine in this process or in its own).
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

# The job never asks vLLM for structured output (no sampling option sets it), so every request decodes freely.
NO_STRUCTURED_OUTPUT = "off"


def _attention_backends(worker: Any) -> list[str]:
    """Run inside each vLLM worker (LLM.collective_rpc): the attention backends of its model runner's attention
    groups, the target's and the drafter's (V2 keeps the speculator's apart)."""
    runner = getattr(worker, "model_runner", None)
    groups = list(getattr(runner, "attn_groups", None) or [])
    groups += list(getattr(getattr(runner, "speculator", None), "attn_groups", None) or [])
    names = {group.backend.get_name() for per_kv_group in groups for group in per_kv_group}
    return sorted(names)


def _flag(value: Any) -> bool | None:
    return None if value is None else bool(value)


def resolved_settings(llm: Any) -> dict[str, Any]:
    """The settings of a started ``vllm.LLM`` (see the module docstring); a value vLLM does not expose is None."""
    config = llm.llm_engine.vllm_config
    speculative = config.speculative_config
    draft = getattr(speculative, "draft_model_config", None) if speculative is not None else None
    cache, scheduler = config.cache_config, config.scheduler_config
    try:
        per_worker = llm.collective_rpc(_attention_backends)
        backends = ",".join(sorted({name for names in per_worker for name in names})) or None
    except Exception as exc:  # a runner without attention groups: the rest is still worth recording
        log.warning("could not read the attention backend from vLLM's workers (%s); recorded as unknown", exc)
        backends = None
    return {
        # The draft's context, capped at the target's by vLLM (SpeculativeConfig._maybe_override_draft_max_model_len);
        # null without a separate draft model config (n-gram, suffix, none).
        "draft_max_model_len": getattr(draft, "max_model_len", None),
        "prefix_caching": _flag(cache.enable_prefix_caching),
        "chunked_prefill": _flag(scheduler.enable_chunked_prefill),
        # vLLM decides it at config time (None: left undecided, recorded as unknown rather than as off).
        "async_scheduling": _flag(scheduler.async_scheduling),
        "structured_outputs": NO_STRUCTURED_OUTPUT,
        "model_runner": "v2" if config.use_v2_model_runner else "v1",
        "attention_backend": backends,
    }
