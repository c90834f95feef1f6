"""What the step timing costs (issue 52, goal <= 1 % of a step): its per-step work, timed alone over many calls,
against the steps of real runs.

    python -m specbatch.bench.step_overhead [--prompts 64] [--max-tokens 64] [--calls 200000] [--output-root DIR]
    python -m specbatch.bench.step_overhead --run RUN_FOLDER [RUN_FOLDER ...]

The per-step work is what timing adds to each engine step: the streaming loop's two clock reads, ``StepLog.record``
(specbatch.run.step_log), and the offline vLLM engine's stat logger (``StepStats.record`` + ``take``,
specbatch.backends.vllm.step_stats) fed vLLM's own stats objects; each is timed over ``--calls`` calls and taken per
call. The stream's file is written once at its end: its write, timed on each stream's own table, is spread over the
stream's steps. The steps: spec=none and spec=ngram (k 3) on the default data set at the default batch (``--prompts``
rows, all in one batch), through the job's own code, each writing its steps file; or the steps files of existing run
folders (``--run``). Overhead = per-step cost / median step time, per set-up; the shortest step is shown beside it
(the tail of a job, where the batch empties, has the shortest steps).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specbatch.backends.vllm.step_stats import StepStats, sample_stats
from specbatch.bench import machine_header
from specbatch.engine import StepLoad
from specbatch.run.records.steps_file import StepTable, read_all_steps, write_steps
from specbatch.run.step_log import StepLog

log = logging.getLogger(__name__)

GOAL_PERCENT = 1.0
# Rounds of --calls calls each part is timed over (the least is taken).
ROUNDS = 5
SETUPS = (("none", ["spec=none"]), ("ngram-k3", ["spec=ngram", "spec.num_speculative_tokens=3"]))


@dataclass(frozen=True)
class CallCosts:
    """Seconds per step of each part of the timing's per-step work."""

    clock: float
    step_log: float
    vllm_logger: float

    @property
    def per_step(self) -> float:
        return self.clock + self.step_log + self.vllm_logger


@dataclass(frozen=True)
class SetupSteps:
    """The steps of one set-up (over all its streams) and the seconds its steps files took to write."""

    setup: str
    seconds: list[float]
    write_seconds: float

    def overhead(self, costs: CallCosts) -> tuple[float, float]:
        """Per-step cost in % of the median step and of the shortest step."""
        per_step = costs.per_step + self.write_seconds / len(self.seconds)
        return 100 * per_step / statistics.median(self.seconds), 100 * per_step / min(self.seconds)


def _per_call(call: Callable[[], Any], calls: int, rounds: int = ROUNDS) -> float:
    """Seconds per call, the least of ``rounds`` rounds of ``calls`` calls (as timeit advises: what is above the
    least is other processes' doing, on a shared machine)."""
    best = float("inf")
    for _ in range(rounds):
        began = time.perf_counter()
        for _ in range(calls):
            call()
        best = min(best, time.perf_counter() - began)
    return best / calls


def measure_call_costs(calls: int, scheduler_stats: Any, iteration_stats: Any) -> CallCosts:
    """Each part of the per-step work, timed over ``calls`` calls (the loop's own cost, an empty call's, taken off)."""
    empty = _per_call(lambda: None, calls)
    clock = time.perf_counter

    def two_clock_reads() -> None:
        clock()
        clock()

    steps = StepLog("bench", None, 64)
    load = StepLoad(64, 64, 0, 0)
    stats = StepStats()

    def logger_step() -> None:
        stats.record(scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx=0)
        stats.take()

    return CallCosts(
        clock=max(_per_call(two_clock_reads, calls) - empty, 0.0),
        step_log=max(_per_call(lambda: steps.record(1.0, 0.01, load), calls) - empty, 0.0),
        vllm_logger=max(_per_call(logger_step, calls) - empty, 0.0),
    )


def setup_steps(tables: Iterable[StepTable]) -> list[SetupSteps]:
    """The steps of each set-up, with the time its streams' files take to write (each written again, to a temporary
    folder, as the stream's end writes it)."""
    by_setup: dict[str, tuple[list[float], float]] = {}
    streams = list(tables)
    with tempfile.TemporaryDirectory() as tmp:
        if streams:
            # Pyarrow's one-off costs of a first write: a job has paid them on its Parquet parts before a stream ends.
            write_steps(Path(tmp) / "warm-up", streams[0])
        for table in streams:
            began = time.perf_counter()
            write_steps(Path(tmp), table)
            written = time.perf_counter() - began
            seconds, write_seconds = by_setup.get(table.setup, ([], 0.0))
            by_setup[table.setup] = (seconds + list(table.columns["seconds"]), write_seconds + written)
    return [SetupSteps(setup, seconds, written) for setup, (seconds, written) in by_setup.items() if seconds]


def overhead_report(setups: list[SetupSteps], costs: CallCosts, calls: int, source: str) -> str:
    """The report: the machine line, the per-step costs, and the overhead per set-up against the goal."""
    us = 1e6
    lines = [
        f"# step timing overhead (python -m specbatch.bench.step_overhead), {time.strftime('%Y-%m-%d %H:%M')}",
        machine_header(),
        f"steps: {source}",
        "",
        f"per step, each the least of {ROUNDS} rounds of {calls} calls: clock reads {costs.clock * us:.3f} µs, "
        f"StepLog.record {costs.step_log * us:.3f} µs, vLLM step logger (record + take) "
        f"{costs.vllm_logger * us:.3f} µs; {costs.per_step * us:.3f} µs in all",
        "",
        "| set-up | steps | median step | shortest step | file write per step | overhead at median | at shortest |",
        "|---|---|---|---|---|---|---|",
    ]
    worst = 0.0
    for s in setups:
        at_median, at_shortest = s.overhead(costs)
        worst = max(worst, at_median)
        lines.append(
            f"| {s.setup} | {len(s.seconds)} | {statistics.median(s.seconds) * 1e3:.2f} ms | "
            f"{min(s.seconds) * 1e3:.2f} ms | {s.write_seconds / len(s.seconds) * us:.2f} µs | "
            f"{at_median:.4f} % | {at_shortest:.4f} % |"
        )
    verdict = "met" if worst <= GOAL_PERCENT else "MISSED"
    lines += ["", f"goal: <= {GOAL_PERCENT:g} % of the median step in every set-up: {verdict} (largest {worst:.4f} %)"]
    return "\n".join(lines)


def run_short_jobs(prompts: int, max_tokens: int, root: Path) -> list[Path]:
    """spec=none and ngram k 3 on the default data set at the default batch; their run folders."""
    from specbatch.config import compose_job
    from specbatch.pipeline import run_job

    stamp = time.strftime("%Y%m%d-%H%M%S")
    common = [f"max_samples={prompts}", f"sampling.max_tokens={max_tokens}", "tracking=off", f"output_root={root}"]
    return [
        run_job(compose_job([*common, *setup, f"run_name=steps-{name}-{stamp}"])).folder.root for name, setup in SETUPS
    ]


def steps_of(folders: Iterable[Path]) -> list[StepTable]:
    """Every stream's steps of every shard of these run folders."""
    return [
        table
        for folder in folders
        for steps in sorted(folder.glob("stats/*/steps"))
        for table in read_all_steps(steps)
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, nargs="+", metavar="RUN_FOLDER", help="read these runs' steps files")
    parser.add_argument("--prompts", type=int, default=64, help="rows of each short run (all in one batch)")
    parser.add_argument("--max-tokens", type=int, default=64, help="new tokens per row of each short run")
    parser.add_argument("--calls", type=int, default=200_000, help="calls each per-step part is timed over")
    parser.add_argument("--output-root", type=Path, default=Path("outputs") / "bench", help="where the runs go")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    folders = args.run or run_short_jobs(args.prompts, args.max_tokens, args.output_root.resolve())
    setups = setup_steps(steps_of(folders))
    if not setups:
        log.error("no steps files under %s (stats/<shard>/steps/): runs older than the step timing have none", folders)
        return 1
    # vLLM's own stats objects, as a speculative step of 64 requests (k 3) hands them over.
    costs = measure_call_costs(args.calls, *sample_stats(requests=64, tokens=100, draft_tokens=192))
    source = ", ".join(str(f) for f in folders)
    sys.stdout.write(overhead_report(setups, costs, args.calls, source) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
