"""spec=auto against every fixed set-up it could have chosen, on the same rows (``jobs/bench.py --auto``).

Per workload (HumanEval-edit, where the answer copies the prompt; plain HumanEval; and ``dataset=chat``, general
questions and translations, where speculation pays little) and per batch (``--auto-batches``: full, the engine's
default, and engine.max_num_seqs=16 and 4, where the rows are many batches and the decision has rows to act on):
each fixed candidate (spec=none, n-gram at k 1, 2, 3, 5, 8, suffix at k 5 unless ``--setups`` says otherwise) and
the whole spec=auto run, each through jobs/generate.py as a fresh process, repeated round-robin.

Throughput is the whole job's: output tokens over the job's wall time, launch to exit, so spec=auto pays for its
pilot, its calibration and measurements, its decision and every engine it starts, and each fixed set-up for its one
engine. Generation-only tok/s and start-ups are listed per set-up beside it.

Goals (issue 52), per cell (workload x batch) on medians: auto >= 0.95 x the best fixed set-up, and >= 0.97 x
spec=none where none is the best; and, over the full-batch cells, auto ahead of the best fixed set-up on at least
one workload. Each finished job leaves ``measured.json`` beside its run: ``--stamp`` of an interrupted invocation
resumes it, measuring only the jobs not done.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import statistics
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from specbatch.bench import machine_header
from specbatch.bench.full_engine import Throughput
from specbatch.bench.processes import run_generate
from specbatch.methods import AUTO_DEFAULT_CANDIDATES
from specbatch.run.folder import RunFolder

log = logging.getLogger(__name__)

# Workloads: humaneval_edit (code editing: the output copies the prompt), plain HumanEval (code written from a
# docstring: little to copy) and chat (MT-Bench's questions and translations: less still).
WORKLOADS = {
    "humaneval_edit": ["dataset=humaneval_edit"],
    "humaneval": ["dataset=humaneval"],
    "chat": ["dataset=chat"],
}
GOAL_BEST, GOAL_NONE = 0.95, 0.97
# --auto-batches' default: the engine's own batch, 16 and 4.
DEFAULT_BATCHES = "full,16,4"
# What each finished job leaves beside its run, read instead of running it again.
MEASURED_FILE = "measured.json"


def batch_list(text: str) -> tuple[int | None, ...]:
    """An argparse type: ``full,16,4`` -> (None, 16, 4); None is the engine's default batch."""
    batches: list[int | None] = []
    for part in text.split(","):
        part = part.strip()
        if part != "full" and not (part.isdigit() and int(part) >= 1):
            raise argparse.ArgumentTypeError(
                f"{text!r}: {part!r} is neither 'full' nor a batch size of 1 or more, e.g. {DEFAULT_BATCHES}"
            )
        value = None if part == "full" else int(part)
        if value not in batches:
            batches.append(value)
    return tuple(batches)


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
        batches = args.auto_batches if isinstance(args.auto_batches, tuple) else batch_list(args.auto_batches)
        unknown = [w for w in args.workloads.split(",") if w not in WORKLOADS]
        if unknown:
            raise ValueError(f"--workloads: {', '.join(unknown)} unknown; choose from {', '.join(WORKLOADS)}")
        return cls(args.workloads.split(","), setups, args.rows, args.auto_max_tokens, args.repeats, batches)


@dataclass(frozen=True)
class Measured:
    """One job: its throughput (full_engine.Throughput), its engine start-ups, and spec=auto's decision."""

    setup: str
    figures: Throughput
    startup_seconds: float
    decision: dict | None = None

    @property
    def job_rate(self) -> float:
        """Output tokens per second of the whole job, launch to exit (what the goals are judged on)."""
        return self.figures.output_tokens / self.figures.wall_seconds

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Measured:
        return cls(data["setup"], Throughput(**data["figures"]), data["startup_seconds"], data.get("decision"))


def _overrides(setup: str) -> list[str]:
    if setup == "auto":
        return ["spec=auto"]
    method, _, k = setup.partition("-k")
    return [f"spec={method}", *([f"spec.num_speculative_tokens={k}"] if k else [])]


def run_one(setup: str, workload: list[str], plan: AutoPlan, root: Path, batch: int | None = None) -> Measured:
    """One job as a fresh process writing under its own ``root``; its figures from the shard summary. A job that
    finished before (its ``measured.json`` is there) is read, not run again."""
    done = root / MEASURED_FILE
    if done.is_file():
        log.info("%s: measured before, read from %s", setup, done)
        return Measured.from_dict(json.loads(done.read_text()))
    if root.exists():
        # Stopped part way: resuming its run would time only the rest, so the whole job is measured again.
        log.info("%s: %s holds a job stopped part way; it is measured again from the start", setup, root)
        shutil.rmtree(root)
    overrides = [
        *workload,
        *_overrides(setup),
        *([f"engine.max_num_seqs={batch}"] if batch else []),
        f"max_samples={plan.rows}" if plan.rows else "max_samples=null",
        f"sampling.max_tokens={plan.max_tokens}",
        "tracking=off",
    ]
    folder, shard, wall = run_generate(overrides, root)
    summary = shard.read_summary()
    decision = RunFolder(folder).read_decision()
    figures = Throughput(summary.rows, summary.output_tokens, summary.generation_seconds, wall)
    measured = Measured(setup, figures, summary.engine_startup_seconds, decision)
    done.write_text(json.dumps(measured.to_dict(), indent=1) + "\n")
    return measured


def batch_name(batch: int | None) -> str:
    return "full" if batch is None else str(batch)


@dataclass(frozen=True)
class Cell:
    """One workload at one batch: every set-up's runs, and the goals' arithmetic on their medians."""

    workload: str
    batch: int | None
    results: dict[str, list[Measured]]

    def rate(self, setup: str) -> float:
        return statistics.median(m.job_rate for m in self.results[setup])

    @property
    def fixed(self) -> dict[str, float]:
        return {s: self.rate(s) for s in self.results if s != "auto"}

    @property
    def best(self) -> str:
        fixed = self.fixed
        return max(fixed, key=lambda s: fixed[s])

    @property
    def vs_best(self) -> float:
        return self.rate("auto") / self.rate(self.best)

    @property
    def vs_none(self) -> float | None:
        return self.rate("auto") / self.rate("none") if "none" in self.results else None

    @property
    def best_goal(self) -> bool:
        return self.vs_best >= GOAL_BEST

    @property
    def none_goal(self) -> bool | None:
        """None where it does not apply: spec=none is not the best fixed set-up (or was not run)."""
        vs_none = self.vs_none
        return None if vs_none is None or self.best != "none" else vs_none >= GOAL_NONE

    @property
    def chose(self) -> str:
        """What auto ran, per repeat (its decision's caption, else its winner's label), counted when they differ."""
        picks = Counter(_pick(m.decision) for m in self.results["auto"])
        if len(picks) == 1:
            return next(iter(picks))
        return ", ".join(f"{pick} ({count}x)" for pick, count in picks.most_common())

    @property
    def title(self) -> str:
        return f"{self.workload}, {'full batch' if self.batch is None else f'engine.max_num_seqs={self.batch}'}"


def _pick(decision: dict | None) -> str:
    if not decision:
        return "no decision"
    return str(decision.get("winner_caption") or decision.get("winner"))


def _met(goal: bool | None) -> str:
    return "n/a" if goal is None else "met" if goal else "MISSED"


def summary_lines(cells: list[Cell]) -> list[str]:
    """The table of every cell, the cells that miss goals 1 or 2, and goal 3's line."""
    lines = [
        f"| workload | batch | none tok/s | best fixed | best tok/s | auto tok/s | auto / best | auto / none "
        f"| auto chose | >= {GOAL_BEST} best | >= {GOAL_NONE} none |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in cells:
        none = f"{c.rate('none'):.1f}" if "none" in c.results else "-"
        vs_none = f"{c.vs_none:.3f}" if c.vs_none is not None else "-"
        lines.append(
            f"| {c.workload} | {batch_name(c.batch)} | {none} | {c.best} | {c.rate(c.best):.1f} | "
            f"{c.rate('auto'):.1f} | {c.vs_best:.3f} | {vs_none} | {c.chose} | {_met(c.best_goal)} | "
            f"{_met(c.none_goal)} |"
        )
    missed = [f"{c.workload} at batch {batch_name(c.batch)}: {why}" for c in cells for why in _misses(c)]
    lines += ["", *([f"- goal missed: {m}" for m in missed] or ["- goals 1 and 2 met in every cell"])]
    return [*lines, f"- {ahead_line(cells)}"]


def _misses(cell: Cell) -> list[str]:
    out = []
    if not cell.best_goal:
        out.append(f"auto / best ({cell.best}) {cell.vs_best:.3f} < {GOAL_BEST}")
    if cell.none_goal is False:
        out.append(f"auto / none {cell.vs_none:.3f} < {GOAL_NONE} (none is best)")
    return out


def ahead_line(cells: list[Cell]) -> str:
    """Goal 3: auto ahead of the best fixed set-up (median against median) on a full-batch workload."""
    full = [c for c in cells if c.batch is None]
    if not full:
        return "auto ahead of the best fixed set-up at full batch: not measured (no full-batch cell)"
    ahead = [c for c in full if c.vs_best > 1.0]
    shown = ahead or [max(full, key=lambda c: c.vs_best)]
    which = ", ".join(f"{c.workload} ({c.vs_best:.3f} x {c.best})" for c in shown)
    if ahead:
        return f"auto ahead of the best fixed set-up at full batch: yes, {which}"
    return f"auto ahead of the best fixed set-up at full batch: no (closest: {which})"


def cell_lines(cell: Cell) -> list[str]:
    """Every set-up's runs in one cell, and what auto decided in each repeat."""
    lines = [
        f"### {cell.title}",
        "",
        "| set-up | job tok/s (median) | per run | generation tok/s | job s | generation s | engine start-ups s |",
        "|---|---|---|---|---|---|---|",
    ]
    for setup, runs in cell.results.items():
        per_run = " ".join(f"{m.job_rate:.1f}" for m in runs)
        generation = statistics.median(m.figures.tokens_per_second for m in runs)
        wall = statistics.median(m.figures.wall_seconds for m in runs)
        seconds = statistics.median(m.figures.generation_seconds for m in runs)
        startups = statistics.median(m.startup_seconds for m in runs)
        lines.append(
            f"| {setup} | {cell.rate(setup):.1f} | {per_run} | {generation:.1f} | {wall:.1f} | {seconds:.1f} "
            f"| {startups:.1f} |"
        )
    for m in cell.results["auto"]:
        d = m.decision or {}
        lines.append(f"- auto chose {_pick(m.decision)} (measured: {d.get('measured')}): {d.get('why')}")
    return lines


def report(plan: AutoPlan, stamp: str, cells: list[Cell]) -> str:
    lines = [
        f"# spec=auto against the fixed set-ups ({stamp})",
        "",
        machine_header(),
        f"greedy, model.dtype as the machine picks it, sampling.max_tokens={plan.max_tokens}, "
        f"{'all' if plan.rows is None else plan.rows} rows; medians of {plan.repeats} run(s) each, round-robin; "
        "tok/s = output tokens / the job's wall seconds, launch to exit (spec=auto: pilot, measuring, decision and "
        "every engine start-up included).",
        "",
        *summary_lines(cells),
    ]
    for cell in cells:
        lines += ["", *cell_lines(cell)]
    return "\n".join(lines) + "\n"


def auto_report(plan: AutoPlan, root: Path, stamp: str) -> tuple[str, Path]:
    """Measure every workload at every batch (each set-up ``plan.repeats`` times, round-robin) and write the report,
    rewritten after each cell so that an interrupted invocation leaves the cells it finished."""
    path = root / f"auto-{stamp}.md"
    cells: list[Cell] = []
    for name in plan.workloads:
        for batch in plan.batches:
            results: dict[str, list[Measured]] = {s: [] for s in [*plan.setups, "auto"]}
            for repeat in range(plan.repeats):
                for setup in results:
                    where = root / f"auto-{stamp}" / name / f"batch-{batch_name(batch)}" / f"{setup}-rep{repeat}"
                    log.info("%s at batch %s: %s, repeat %d", name, batch_name(batch), setup, repeat)
                    results[setup].append(run_one(setup, WORKLOADS[name], plan, where, batch))
            cells.append(Cell(name, batch, results))
            path.write_text(report(plan, stamp, cells))
    return path.read_text(), path
