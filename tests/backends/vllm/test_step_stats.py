"""The offline vLLM engine's step load (specbatch.backends.vllm.step_stats) from vLLM's per-step stats, without an
engine: what each figure is read from, and that vLLM's stat logger manager finds every method it calls."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

from specbatch.backends.vllm.step_stats import StepStats, attach_step_stats, sample_stats
from specbatch.engine import StepLoad


def scheduler(running: int, drafts: int | None = None) -> SimpleNamespace:
    spec = None if drafts is None else SimpleNamespace(num_draft_tokens=drafts)
    return SimpleNamespace(num_running_reqs=running, spec_decoding_stats=spec)


def iteration(tokens: int, prompt: int, finished: int) -> SimpleNamespace:
    return SimpleNamespace(num_generation_tokens=tokens, num_prompt_tokens=prompt, finished_requests=[0] * finished)


def test_a_step_counts_its_running_and_finished_requests_tokens_and_drafts() -> None:
    stats = StepStats()
    assert stats.take() is None  # nothing recorded yet
    stats.record(scheduler(3, drafts=9), iteration(tokens=7, prompt=40, finished=2), mm_cache_stats=None, engine_idx=0)
    # The scheduler counts its running requests after the step: the two that finished in it ran in it too.
    assert stats.take() == StepLoad(requests=5, tokens=7, prompt_tokens=40, draft_tokens=9)
    assert stats.take() is None  # taken once


def test_a_step_without_speculation_or_outputs() -> None:
    stats = StepStats()
    stats.record(scheduler(4), iteration(tokens=4, prompt=0, finished=0))
    assert stats.take() == StepLoad(4, 4, 0, 0)
    # No output in the step (a prefill chunk): vLLM hands no IterationStats.
    stats.record(scheduler(2), None)
    assert stats.take() == StepLoad(2, 0, 0, 0)
    # Nothing ran: no SchedulerStats, no load.
    stats.record(None, None)
    assert stats.take() is None


def test_vllms_own_stats_objects_are_read() -> None:
    # What StepStats reads exists on vLLM's SchedulerStats, IterationStats and SpecDecodingStats.
    stats = StepStats()
    stats.record(*sample_stats(requests=8, tokens=20, draft_tokens=24))
    assert stats.take() == StepLoad(8, 20, 0, 24)


def test_vllm_finds_every_method_it_calls_on_a_logger() -> None:
    from vllm.v1.metrics.loggers import AggregateStatLoggerBase

    wanted = {name for name, _ in inspect.getmembers(AggregateStatLoggerBase, inspect.isfunction)}
    wanted -= {"__init__"}
    assert wanted <= set(dir(StepStats)), wanted - set(dir(StepStats))
    for name in wanted:
        ours = inspect.signature(getattr(StepStats, name)).parameters
        theirs = inspect.signature(getattr(AggregateStatLoggerBase, name)).parameters
        assert list(ours) == list(theirs), name


def test_attached_beside_vllms_loggers_unless_stats_are_off() -> None:
    manager = SimpleNamespace(stat_loggers=["vllm's"])
    stats = attach_step_stats(SimpleNamespace(llm_engine=SimpleNamespace(logger_manager=manager)))
    assert manager.stat_loggers == ["vllm's", stats]
    assert attach_step_stats(SimpleNamespace(llm_engine=SimpleNamespace(logger_manager=None))) is None
