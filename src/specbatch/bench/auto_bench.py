"""spec=auto against every fixed set-up it could have chosen, on the same rows (``jobs/bench.py --auto``).

Per workload and batch (``--auto-batches``: full, the engine's default, and engine.max_num_seqs=16, where the
164 rows of HumanEval are ten batches and the decision has rows to act on): each fixed candidate (spec=none, n-gram
at k 1, 2, 3, 5, 8, suffix at k 5 unless ``--setups`` says otherwise) and the whole spec=auto run, each through
jobs/generate.py as a fresh process, repeated round-robin. Throughput is output tokens over generation seconds, which
for spec=auto include its pilot and any measurements; engine start-ups are listed apart (spec=auto starts one per
set-up it runs). Goals (issue 28): auto >= 0.95 x the best fixed set-up, and >= 0.97 x spec=none where none is best.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from specbatch.bench import machine_header
from specbatch.bench.full_engine import Throughput
from specbatch.bench.processes import PROJECT
from specbatch.methods import AUTO_DEFAULT_CANDIDATES
from specbatch.run.folder import RunFolder, run_folders_below, shard_folders

log = logging.getLogger(__name__)

# Workloads: humaneval_edit (code editing: the output copies the prompt) and plain HumanEval (code written from a
# docstring: little to copy).
WORKLOADS = {
    "humaneval_edit": ["dataset=humaneval_edit"],
    "humaneval": ["dataset=humaneval"],
}
GOAL_BEST, GOAL_NONE = 0.95, 0.97


@dataclass(frozen=True)
class AutoPlan:
    workloads: list[str]
    setups: list[str]
    rows: int | None
    max_tokens: int
    repeats: int
    # engine.max_num_seqs of each section; None: the engine's default (full batch).
    batches: tuple[int | None, ...] = (None,)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> AutoPlan:
        """jobs/bench.py --auto's flags."""
        setups = args.setups.split(",") if args.setups else list(AUTO_DEFAULT_CANDIDATES)
        batches = tuple(None if b == "full" else int(b) for b in args.auto_batches.split(","))
        return cls(args.workloads.split(","), setups, args.rows, args.auto_max_tokens, args.repeats, batches)


@dataclass(frozen=True)
class Measured:
    """One job: its throughput (full_engine.Throughput), its engine start-ups, and spec=auto's decision."""

    setup: str
    figures: Throughput
    startup_seconds: float
    decision: dict | None = None


def _overrides(setup: str) -> list[str]:
    if setup == "auto":
        return ["spec=auto"]
    method, _, k = setup.partition("-k")
    return [f"spec={method}", *([f"spec.num_speculative_tokens={k}"] if k else [])]


def run_one(setup: str, workload: list[str], plan: AutoPlan, root: Path, batch: int | None = None) -> Measured:
    """One job as a fresh process writing under its own ``root``; its figures from the shard summary."""
    overrides = [
        *workload,
        *_overrides(setup),
        *([f"engine.max_num_seqs={batch}"] if batch else []),
        f"max_samples={plan.rows}" if plan.rows else "max_samples=null",
        f"sampling.max_tokens={plan.max_tokens}",
        "tracking=off",
        f"output_root={root}",
    ]
    began = time.perf_counter()
    subprocess.run([sys.executable, str(PROJECT / "jobs/generate.py"), *overrides], cwd=PROJECT, check=True)
    wall = time.perf_counter() - began
    (folder,) = run_folders_below(root / "runs")
    (shard,) = shard_folders(folder)
    summary = shard.read_summary()
    decision = RunFolder(folder).read_decision()
    figures = Throughput(summary.rows, summary.output_tokens, summary.generation_seconds, wall)
    return Measured(setup, figures, summary.engine_startup_seconds, decision)


def auto_report(plan: AutoPlan, root: Path, stamp: str) -> tuple[str, Path]:
    """Measure every workload (each set-up ``plan.repeats`` times, round-robin) and write the report."""
    lines = [
        f"# spec=auto against the fixed set-ups ({stamp})",
        "",
        machine_header(),
        f"greedy, model.dtype as the machine picks it, sampling.max_tokens={plan.max_tokens}, "
        f"{'all' if plan.rows is None else plan.rows} rows; medians of {plan.repeats} run(s) each, round-robin; "
        "tok/s = output tokens / generation seconds (spec=auto: pilot and measuring included); start-ups apart.",
    ]
    for name in plan.workloads:
        for batch in plan.batches:
            title = f"{name}, {'full batch' if batch is None else f'engine.max_num_seqs={batch}'}"
            results: dict[str, list[Measured]] = {s: [] for s in [*plan.setups, "auto"]}
            for repeat in range(plan.repeats):
                for setup in results:
                    where = root / f"auto-{stamp}" / name / f"batch-{batch or 'full'}" / f"{setup}-rep{repeat}"
                    log.info("%s: %s, repeat %d", title, setup, repeat)
                    results[setup].append(run_one(setup, WORKLOADS[name], plan, where, batch))
            lines += ["", *workload_lines(title, results)]
    path = root / f"auto-{stamp}.md"
    path.write_text("\n".join(lines) + "\n")
    return "\n".join(lines), path


def workload_lines(name: str, results: dict[str, list[Measured]]) -> list[str]:
    rate = {s: statistics.median(m.figures.tokens_per_second for m in runs) for s, runs in results.items()}
    fixed = {s: r for s, r in rate.items() if s != "auto"}
    best = max(fixed, key=lambda s: fixed[s])
    lines = [
        f"## {name}",
        "",
        "| set-up | output tok/s (median) | per run | generation s | engine start-ups s |",
        "|---|---|---|---|---|",
    ]
    for setup, runs in results.items():
        per_run = " ".join(f"{m.figures.tokens_per_second:.1f}" for m in runs)
        seconds = statistics.median(m.figures.generation_seconds for m in runs)
        startups = statistics.median(m.startup_seconds for m in runs)
        lines.append(f"| {setup} | {rate[setup]:.1f} | {per_run} | {seconds:.1f} | {startups:.1f} |")
    for m in results["auto"]:
        d = m.decision or {}
        lines.append(f"- auto chose {d.get('winner')} (measured: {d.get('measured')}): {d.get('why')}")
    ratio_best = rate["auto"] / fixed[best]
    lines.append(
        f"- auto / best fixed ({best}): {ratio_best:.3f} (goal >= {GOAL_BEST}: "
        f"{'met' if ratio_best >= GOAL_BEST else 'missed'})"
    )
    ratio_none = rate["auto"] / fixed["none"] if "none" in fixed else None
    if ratio_none is not None:
        goal = f" (goal >= {GOAL_NONE} as none is best: {'met' if ratio_none >= GOAL_NONE else 'missed'})"
        lines.append(f"- auto / none: {ratio_none:.3f}{goal if best == 'none' else ''}")
    return lines
