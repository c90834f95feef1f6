"""The step timing's overhead bench (specbatch.bench.step_overhead) computes its figures right, on a small fake
steps table of a run folder (no vLLM)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from specbatch.bench.step_overhead import (
    CallCosts,
    SetupSteps,
    measure_call_costs,
    overhead_report,
    setup_steps,
    steps_of,
)
from specbatch.run.records.steps_file import StepTable, write_steps


def table(setup: str, seconds: list[float]) -> StepTable:
    n = len(seconds)
    columns = {"at": [float(i) for i in range(n)], "seconds": seconds, "requests": [4] * n, "tokens": [4] * n}
    columns |= {"prompt_tokens": [0] * n, "draft_tokens": [0] * n}
    return StepTable(setup, None, 4, columns)


def test_the_overhead_is_the_per_step_cost_over_the_median_and_the_shortest_step() -> None:
    # 2 + 1 + 2 = 5 µs a step, and a 10 µs file write over 5 steps: 7 µs a step. Median step 2 ms, shortest 0.7 ms.
    costs = CallCosts(clock=2e-6, step_log=1e-6, vllm_logger=2e-6)
    setups = [SetupSteps("none", [0.002, 0.0007, 0.003, 0.002, 0.004], write_seconds=10e-6)]
    report = overhead_report(setups, costs, calls=1000, source="fake")
    assert report.splitlines()[1].startswith("machine: ")
    assert "5.000 µs in all" in report
    # 7 µs / 2 ms = 0.35 %; 7 µs / 0.7 ms = 1 %.
    assert "| none | 5 | 2.00 ms | 0.70 ms | 2.00 µs | 0.3500 % | 1.0000 % |" in report
    assert report.endswith("goal: <= 1 % of the median step in every set-up: met (largest 0.3500 %)")
    # A set-up whose median step is as short as its timing misses the goal.
    slow = overhead_report([SetupSteps("ngram", [7e-6, 7e-6], write_seconds=0.0)], costs, 1000, "fake")
    assert slow.endswith("goal: <= 1 % of the median step in every set-up: MISSED (largest 71.4286 %)")


def test_the_steps_of_a_run_folder_are_pooled_per_setup(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_steps(run / "stats" / "shard-00000-of-00002" / "steps", table("none", [0.1, 0.2]))
    write_steps(run / "stats" / "shard-00000-of-00002" / "steps", table("ngram-k3", [0.3]))
    write_steps(run / "stats" / "shard-00001-of-00002" / "steps", table("none", [0.4]))
    setups = {s.setup: s for s in setup_steps(steps_of([run]))}
    assert sorted(setups["none"].seconds) == [0.1, 0.2, 0.4] and setups["ngram-k3"].seconds == [0.3]
    assert all(s.write_seconds > 0 for s in setups.values())


def test_each_part_of_the_per_step_work_is_timed() -> None:
    scheduler = SimpleNamespace(num_running_reqs=4, spec_decoding_stats=None)
    iteration = SimpleNamespace(num_generation_tokens=4, num_prompt_tokens=0, finished_requests=[])
    costs = measure_call_costs(2000, scheduler, iteration)
    assert costs.per_step == costs.clock + costs.step_log + costs.vllm_logger
    assert min(costs.clock, costs.step_log, costs.vllm_logger) >= 0 and costs.per_step < 1e-3
