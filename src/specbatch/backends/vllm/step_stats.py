"""What each step of an offline vLLM engine held (specbatch.engine.StepLoad), read from vLLM's own per-step stats.

Why this route: the job asks for ``RequestOutputKind.FINAL_ONLY`` outputs, so ``LLMEngine.step()`` returns only the
requests that finished in the step and says nothing of the others; ``LLM.get_metrics()`` after every step would
cost a Prometheus collect of every vLLM metric. But ``LLMEngine.step()`` hands every step's ``SchedulerStats`` and
``IterationStats`` to its ``StatLoggerManager`` (vllm/v1/engine/llm_engine.py, vLLM 0.32), whether the engine core
runs in this process or in its own (the scheduler's stats travel in its ``EngineCoreOutputs`` either way). A logger
of ours beside vLLM's keeps the few figures of the last step: a handful of attribute reads per step.

What the figures are (vLLM's own definitions):

- requests: ``num_running_reqs`` (counted by the scheduler after the step's outputs, so without the requests that
  finished in it) plus the requests that finished in the step (``IterationStats.finished_requests``). A step that
  ends the job's last request ran one request, not none.
- tokens: ``IterationStats.num_generation_tokens``, the new tokens of every request's output in the step.
- prompt_tokens: ``IterationStats.num_prompt_tokens``, the prompts of the requests whose prefill ended in the step.
- draft_tokens: ``SpecDecodingStats.num_draft_tokens``, the draft tokens the step verified (the same figure vLLM's
  ``vllm:spec_decode_num_draft_tokens`` counter adds up; no ``SpecDecodingStats``: none verified).

``IterationStats`` is None in a step that produced no output; ``SchedulerStats`` is None when nothing ran, and the
manager itself is absent when vLLM's stats are off (``disable_log_stats``): no load is known then.
"""

from __future__ import annotations

import logging
from typing import Any

from specbatch.engine.base import StepLoad

log = logging.getLogger(__name__)


class StepStats:
    """A stat logger for vLLM's ``StatLoggerManager.stat_loggers`` (duck-typed, so that this module imports no vLLM:
    every method the manager calls on its loggers, tests/backends/vllm/test_step_stats.py checks it against vLLM's
    ``AggregateStatLoggerBase``)."""

    def __init__(self) -> None:
        # The load of the last step recorded, until take() hands it over.
        self.load: StepLoad | None = None

    def record(
        self,
        scheduler_stats: Any,
        iteration_stats: Any,
        mm_cache_stats: Any = None,
        engine_idx: int = 0,
    ) -> None:
        if scheduler_stats is None:
            return
        spec = scheduler_stats.spec_decoding_stats
        drafts = spec.num_draft_tokens if spec is not None else 0
        if iteration_stats is None:
            self.load = StepLoad(scheduler_stats.num_running_reqs, 0, 0, drafts)
            return
        self.load = StepLoad(
            scheduler_stats.num_running_reqs + len(iteration_stats.finished_requests),
            iteration_stats.num_generation_tokens,
            iteration_stats.num_prompt_tokens,
            drafts,
        )

    def take(self) -> StepLoad | None:
        """The load recorded since the last take (None: vLLM recorded no step)."""
        load, self.load = self.load, None
        return load

    # The rest of what the manager calls on its loggers: nothing to do for this one.
    def log(self) -> None:
        pass

    def log_engine_initialized(self) -> None:
        pass

    def record_sleep_state(self, is_awake: int, level: int) -> None:
        pass

    def record_admission_rejection(self, reason: str) -> None:
        pass


def sample_stats(requests: int, tokens: int, draft_tokens: int) -> tuple[Any, Any]:
    """vLLM's own per-step stats objects (SchedulerStats, IterationStats) as a step of ``requests`` requests hands
    them to its loggers, for timing StepStats on what it reads (specbatch.bench.step_overhead)."""
    from vllm.v1.metrics.stats import IterationStats, SchedulerStats
    from vllm.v1.spec_decode.metrics import SpecDecodingStats

    spec = SpecDecodingStats.new(max(draft_tokens // max(requests, 1), 1))
    spec.num_draft_tokens = draft_tokens
    iteration = IterationStats()
    iteration.num_generation_tokens = tokens
    return SchedulerStats(num_running_reqs=requests, spec_decoding_stats=spec), iteration


def attach_step_stats(llm: Any) -> StepStats | None:
    """A StepStats recording every step of ``llm``'s engine; None when vLLM keeps no stats (its StatLoggerManager is
    absent: ``disable_log_stats``), and then the engine's steps are not timed."""
    manager = getattr(llm.llm_engine, "logger_manager", None)
    if manager is None:
        log.info("vLLM keeps no per-step stats (log stats off): the engine's steps are not timed")
        return None
    stats = StepStats()
    manager.stat_loggers.append(stats)
    return stats
