"""The drafter bench's arithmetic, without a model: the mean engine step from a run's step timing, where a slower
head's step goes, and the goal line."""

from __future__ import annotations

from pathlib import Path

from specbatch.bench.drafter_bench import Measured, _goal_line, _where


def _measured(steps: dict[str, dict[str, dict[str, float]]] | None, tokens: int = 100) -> Measured:
    return Measured(Path("."), 1.0, {"output_tokens": tokens, "generation_seconds": 2.0, "step_buckets": steps})


def test_the_mean_step_is_every_buckets_seconds_over_its_steps() -> None:
    m = _measured({"eagle3-k3": {"1": {"steps": 10, "seconds": 1.0}, "2-3": {"steps": 30, "seconds": 2.0}}})
    assert m.mean_step_ms() == 75.0 and m.rate == 50.0
    assert _measured(None).mean_step_ms() is None


def test_a_slower_heads_step_is_split_into_verification_and_draft_passes() -> None:
    head = _measured({"s": {"1": {"steps": 1, "seconds": 0.070}}})
    ngram = _measured({"s": {"1": {"steps": 1, "seconds": 0.040}}})
    none = _measured({"s": {"1": {"steps": 1, "seconds": 0.035}}})
    line = _where(head, ngram, none)
    assert "step 2.00x none's" in line and "about 40.0 ms" in line and "about 30.0 ms (10.0 ms each)" in line
    assert _where(_measured(None), ngram, none) == "no step timing"


def test_the_goal_needs_the_larger_head_at_1_6_and_above_the_smaller() -> None:
    assert _goal_line({"large": 1.7, "small": 1.5}).endswith(": met")
    assert _goal_line({"large": 1.7, "small": 1.8}).endswith("NOT met")
    assert _goal_line({"large": 1.5, "small": 1.2}).endswith("NOT met")
