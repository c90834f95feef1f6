"""The engine settings that change acceptance without anyone asking, as the engine resolved them for a run: which
they are, how several launches' merge, their MLflow params and their differences between runs. The vllm backend
reads them from its started engine (specbatch.backends.vllm.vllm_settings).

vLLM's issue tracker shows acceptance moving with settings that no run config names: the draft's own
``max_model_len`` (past it vLLM stops drafting for a request: acceptance falls towards 0, vllm#58080), prefix caching
with MTP/EAGLE on hybrid models (vllm#43559, vllm#53912), structured output with speculation (vllm#46118), and the
model runner and attention backend vLLM picks. Each run records them in its shard summary (``acceptance_settings``)
and its MLflow params (``acceptance_settings.<key>``), and jobs/compare.py warns when set-ups it puts side by side
differ in any of them.

What this module does not know: a server's settings (a server backend records none) and anything an engine decides
per request.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

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
