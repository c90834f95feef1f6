"""The engine settings that change acceptance without anyone asking, as vLLM resolved them for a run.

vLLM's issue tracker shows acceptance moving with settings that no run config names: the draft's own
``max_model_len`` (past it vLLM stops drafting for a request: acceptance falls towards 0, vllm#58080), prefix caching
with MTP/EAGLE on hybrid models (vllm#43559, vllm#53912), structured output with speculation (vllm#46118), and the
model runner and attention backend vLLM picks. Each run records them in its shard summary (``acceptance_settings``)
and its MLflow params (``acceptance_settings.<key>``), and jobs/compare.py warns when set-ups it puts side by side
differ in any of them.

What this module knows: vLLM 0.32's resolved ``VllmConfig`` (read in the job's process) and its workers' attention
groups (asked through ``LLM.collective_rpc``, so it works with the engine in this process or in its own). What it
does not know: a server's settings (a server backend records none) and anything vLLM decides per request.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

log = logging.getLogger(__name__)

# The recorded settings, in the order tables show them.
SETTINGS = (
    "draft_max_model_len",
    "prefix_caching",
    "chunked_prefill",
    "async_scheduling",
    "structured_outputs",
    "model_runner",
    "attention_backend",
)
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


def merged_settings(each: Iterable[dict[str, Any] | None]) -> dict[str, Any] | None:
    """The settings of several launches or shards: theirs when they agree, else every key with its values joined
    by " | " where they differ (a run resumed on another engine set-up says so); None when none recorded any."""
    known = [settings for settings in each if settings]
    if not known:
        return None
    out: dict[str, Any] = {}
    for key in dict.fromkeys(k for settings in known for k in settings):
        values = list(dict.fromkeys(settings.get(key) for settings in known))
        out[key] = values[0] if len(values) == 1 else " | ".join(str(v) for v in values)
    return out


def as_params(settings: dict[str, Any] | None) -> dict[str, str]:
    """MLflow params: ``acceptance_settings.<key>`` -> its value as text (null as "none")."""
    return {
        f"acceptance_settings.{key}": "none" if value is None else str(value)
        for key, value in (settings or {}).items()
    }


def differences(settings_by_run: dict[str, dict[str, Any] | None]) -> dict[str, dict[str, list[str]]]:
    """For each setting whose recorded values differ between runs: value -> the runs that had it. What a run did not
    record is left out, not counted as a difference: runs written before these were recorded, a server's, and a
    null value (no draft max_model_len without a draft, an attention backend vLLM did not tell)."""
    out: dict[str, dict[str, list[str]]] = {}
    recorded = {run: settings for run, settings in settings_by_run.items() if settings}
    for key in SETTINGS:
        values: dict[str, list[str]] = {}
        for run, settings in recorded.items():
            if settings.get(key) is not None:
                values.setdefault(str(settings[key]), []).append(run)
        if len(values) > 1:
            out[key] = values
    return out
