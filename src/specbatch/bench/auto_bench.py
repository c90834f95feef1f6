"""spec=auto against the fixed set-ups it could have chosen, on jobs of the size people run (``jobs/bench.py --auto``).

Per cell (a workload at one batch; ``--cells``, by default help-desk chat at batch 16 and at the engine's full batch,
code editing and retrieval answers at batch 16, each 1,000 rows: specbatch.assets.workloads):

1. a short sweep: each of auto's candidates (``--setups``; by default the default model's, its trained head included
   once built) once on the cell's first ``--sweep-rows`` rows; the two fastest speculative set-ups become the cell's
   fixed ones, beside spec=none;
2. ``--repeats`` rounds, alternating: spec=auto, a fixed run of what it chose when that is not one of the fixed
   set-ups already (its decision's overrides: a k schedule is run as one), spec=none and the two fixed set-ups.

Every job is a fresh jobs/generate.py process; throughput is the whole job's (output tokens over wall time, launch to
exit), so spec=auto pays for its pilot, its measurements and decision and every engine it starts. A cell's jobs
write their runs in one ``output_root`` (``history/``), as a user's jobs of one data set and model do: spec=auto
pilots on what the runs before it found fastest (specbatch.auto.likeliest). The goals:
specbatch.bench.auto_cells. Each finished job leaves ``measured.json`` beside its run: ``--stamp`` of an interrupted
invocation resumes it (the sweep included), measuring only the jobs not done; the runs and the report stay under the
repo's ``outputs/bench``.
"""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from specbatch.auto.candidates import candidates
from specbatch.bench import machine_header
from specbatch.bench.auto_cells import SETTLE_MINUTES, Cell, Measured, batch_name, cell_lines, summary_lines
from specbatch.bench.full_engine import Throughput
from specbatch.bench.processes import named_run_folders, run_generate
from specbatch.common.machine import minutes_since_boot
from specbatch.config import ConfigError
from specbatch.config.compose import compose_job
from specbatch.methods import AUTO_DEFAULT_CANDIDATES
from specbatch.run.folder import RunFolder, shard_folders

log = logging.getLogger(__name__)

# Workloads: the 1,000-row ones (help-desk chat, where little pays; code editing, where the answer copies the prompt;
# retrieval answers, which copy a help page) and the smaller sets of the earlier benches.
WORKLOADS = {
    "helpdesk": ["dataset=helpdesk"],
    "code_edit": ["dataset=code_edit"],
    "retrieval": ["dataset=retrieval"],
    "humaneval_edit": ["dataset=humaneval_edit"],
    "humaneval": ["dataset=humaneval"],
    "chat": ["dataset=chat"],
}
# --cells' default: workload@batch (full: the engine's own batch).
DEFAULT_CELLS = "helpdesk@16,helpdesk@full,code_edit@16,retrieval@16"
# Speculative set-ups the short sweep keeps for the rounds, beside spec=none.
KEPT = 2
# What each finished job leaves beside its run, read instead of running it again.
MEASURED_FILE = "measured.json"


def cell_list(text: str) -> tuple[tuple[str, int | None], ...]:
    """An argparse type: ``helpdesk@16,code_edit@full`` -> (("helpdesk", 16), ("code_edit", None))."""
    cells: list[tuple[str, int | None]] = []
    for part in text.split(","):
        workload, _, batch = part.strip().partition("@")
        if workload not in WORKLOADS:
            raise argparse.ArgumentTypeError(
                f"{text!r}: {workload!r} is no workload; choose from {', '.join(WORKLOADS)} (e.g. {DEFAULT_CELLS})"
            )
        if batch != "full" and not (batch.isdigit() and int(batch) >= 1):
            raise argparse.ArgumentTypeError(
                f"{text!r}: {part.strip()!r} needs @full or @<batch of 1 or more>, e.g. {DEFAULT_CELLS}"
            )
        cell = (workload, None if batch == "full" else int(batch))
        if cell not in cells:
            cells.append(cell)
    return tuple(cells)


@dataclass(frozen=True)
class AutoPlan:
    cells: tuple[tuple[str, int | None], ...]
    # The sweep's set-ups (auto's candidates by default); spec=none is run in every round whatever the sweep says.
    setups: list[str]
    rows: int | None
    max_tokens: int
    repeats: int
    sweep_rows: int = 200
    # The first round (1-based) run and counted: the rounds before it are neither run nor read, e.g. rounds an older
    # spec=auto ran (their runs stay in the cell's history/, which spec=auto reads as a user's earlier jobs).
    from_round: int = 1

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> AutoPlan:
        """jobs/bench.py --auto's flags."""
        setups = args.setups.split(",") if args.setups else default_setups()
        cells = args.cells if isinstance(args.cells, tuple) else cell_list(args.cells)
        from_round = getattr(args, "from_round", 1)
        return cls(cells, setups, args.rows or 1000, args.auto_max_tokens, args.repeats, args.sweep_rows, from_round)

    @property
    def rounds(self) -> range:
        """The rounds run and counted, 0-based (the run folders' ``-rep<n>``)."""
        return range(self.from_round - 1, self.repeats)

    def rounds_said(self) -> str:
        counted = len(self.rounds)
        if self.from_round == 1:
            return f"{counted} round(s)"
        return f"{counted} round(s), {self.from_round} to {self.repeats} (the earlier ones not counted)"


def default_setups() -> list[str]:
    """spec=auto's own candidates for the default model: the checkpoint-free ones and its trained head once built
    (the sweep gives spec=auto an earlier run of each, as a user's sweep would)."""
    try:
        return [c.label for c in candidates(compose_job(["spec=auto"]))]
    except ConfigError as exc:
        log.warning("spec=auto's candidates could not be composed (%s): the sweep runs the checkpoint-free ones", exc)
        return list(AUTO_DEFAULT_CANDIDATES)


def setup_overrides(setup: str) -> list[str]:
    """A set-up's label as overrides: ``auto``, ``none``, ``ngram-k3``."""
    if setup == "auto":
        return ["spec=auto"]
    method, _, k = setup.partition("-k")
    return [f"spec={method}", *([f"spec.num_speculative_tokens={k}"] if k else [])]


def chosen_overrides(decision: dict) -> list[str]:
    """The overrides that run spec=auto's choice as a fixed set-up: its decision's own (a k schedule included)."""
    overrides = shlex.split(str(decision.get("overrides") or "")) or setup_overrides(str(decision.get("winner")))
    schedule = decision.get("k_schedule")
    if schedule and not any(o.startswith("spec.k_schedule=") for o in overrides):
        overrides.append("spec.k_schedule=[" + ",".join(f"[{a},{b},{c}]" for a, b, c in schedule) + "]")
    return overrides


def job_overrides(
    workload: list[str], spec: list[str], plan: AutoPlan, batch: int | None, rows: int | None
) -> list[str]:
    """A bench job's overrides: the workload, the set-up, the cell's batch (None: the engine's own), ``rows`` (None:
    all) and the plan's new tokens, untracked."""
    return [
        *workload,
        *spec,
        *([f"engine.max_num_seqs={batch}"] if batch else []),
        f"max_samples={rows}" if rows else "max_samples=null",
        f"sampling.max_tokens={plan.max_tokens}",
        "tracking=off",
    ]


def run_one(
    setup: str,
    spec: list[str],
    workload: list[str],
    plan: AutoPlan,
    root: Path,
    batch: int | None,
    rows: int | None,
    history: Path | None = None,
) -> Measured:
    """One job as a fresh process; its figures from the shard summary, kept in ``root``. Its run is written under
    ``root`` itself, or, with ``history``, under that ``output_root`` shared by the cell's jobs (each its own run
    folder, named after ``root``'s place in the cell), where spec=auto finds the runs before it as a user's job
    would (specbatch.auto.likeliest). A job that finished before (its ``measured.json`` is there) is read, not run
    again."""
    done = root / MEASURED_FILE
    name = "-".join(root.relative_to(history.parent).parts) if history is not None else None
    if done.is_file():
        log.info("%s: measured before, read from %s", setup, done)
        measured = Measured.from_dict(json.loads(done.read_text()))
        if measured.steps is None and history is not None and name is not None:
            # Measured before its steps were kept: they are in its run folder's summary.
            for folder in named_run_folders(history, name):
                (shard,) = shard_folders(folder)
                measured = replace(measured, steps=shard.read_summary().step_buckets)
        return measured
    stale = [root] if history is None and root.exists() else []
    if history is not None and name is not None:
        stale += named_run_folders(history, name)
    for path in stale:
        # Stopped part way: resuming its run would time only the rest, so the whole job is measured again.
        log.info("%s: %s holds a job stopped part way; it is measured again from the start", setup, path)
        shutil.rmtree(path)
    booted = minutes_since_boot()
    folder, shard, wall = run_generate(job_overrides(workload, spec, plan, batch, rows), history or root, name)
    summary = shard.read_summary()
    decision = RunFolder(folder).read_decision()
    figures = Throughput(summary.rows, summary.output_tokens, summary.generation_seconds, wall)
    measured = Measured(setup, figures, summary.engine_startup_seconds, decision, summary.step_buckets, booted)
    root.mkdir(parents=True, exist_ok=True)
    done.write_text(json.dumps(measured.to_dict(), indent=1) + "\n")
    return measured


def sweep(plan: AutoPlan, workload: str, batch: int | None, where: Path, history: Path) -> dict[str, float]:
    """Each set-up once on the cell's first ``sweep_rows`` rows: job tok/s by set-up."""
    rates = {}
    for setup in plan.setups:
        log.info("%s at batch %s: the sweep's %s", workload, batch_name(batch), setup)
        job = run_one(
            setup, setup_overrides(setup), WORKLOADS[workload], plan, where / setup, batch, plan.sweep_rows, history
        )
        rates[setup] = job.job_rate
    return rates


def kept(rates: dict[str, float]) -> list[str]:
    """The sweep's fastest speculative set-ups, at most KEPT (spec=none and spec=auto run anyway)."""
    ranked = sorted((s for s in rates if s not in ("none", "auto")), key=lambda s: -rates[s])
    return ranked[:KEPT]


def measure_cell(plan: AutoPlan, workload: str, batch: int | None, where: Path) -> Cell:
    """The sweep, then ``repeats`` rounds: auto, a fixed run of its choice unless that set-up is run anyway, spec=none
    and the sweep's two fastest."""
    # Every job of the cell writes its run in one output_root, as a user's jobs of one data set and model do: the
    # sweep's runs and the earlier rounds are what spec=auto reads to choose its pilot and what it measures.
    history = where / "history"
    rates = sweep(plan, workload, batch, where / "sweep", history) if len(plan.setups) > 1 + KEPT else {}
    fixed = ["none", *(kept(rates) if rates else [s for s in plan.setups if s != "none"])]
    results: dict[str, list[Measured]] = {"auto": [], **{s: [] for s in fixed}}
    data = WORKLOADS[workload]
    for repeat in plan.rounds:
        log.info("%s at batch %s: round %d of %d", workload, batch_name(batch), repeat + 1, plan.repeats)
        auto = run_one("auto", ["spec=auto"], data, plan, where / f"auto-rep{repeat}", batch, plan.rows, history)
        results["auto"].append(auto)
        pick = auto.pick or "none"
        if pick not in fixed:
            spec = chosen_overrides(auto.decision or {})
            chosen_root = where / f"chosen-{pick}-rep{repeat}"
            chosen = run_one(pick, spec, data, plan, chosen_root, batch, plan.rows, history)
            results.setdefault(pick, []).append(chosen)
        for setup in fixed:
            fixed_root = where / f"{setup}-rep{repeat}"
            job = run_one(setup, setup_overrides(setup), data, plan, fixed_root, batch, plan.rows, history)
            results[setup].append(job)
    return Cell(workload, batch, results, rates)


def report(plan: AutoPlan, stamp: str, cells: list[Cell]) -> str:
    lines = [
        f"# spec=auto against the fixed set-ups ({stamp})",
        "",
        machine_header(),
        f"greedy, model.dtype as the machine picks it, sampling.max_tokens={plan.max_tokens}, "
        f"{'all' if plan.rows is None else plan.rows} rows; the fixed set-ups: spec=none and the {KEPT} fastest of a "
        f"sweep on {plan.sweep_rows} rows; medians of {plan.rounds_said()}, alternating; tok/s = output tokens / "
        "the job's wall seconds, launch to exit (spec=auto: pilot, measuring, decision and every engine start-up "
        "included).",
        "",
        *summary_lines(cells),
    ]
    for cell in cells:
        lines += ["", *cell_lines(cell)]
    return "\n".join(lines) + "\n"


def warm_up(plan: AutoPlan) -> None:
    """One short untimed job before the invocation's first timed one, in a folder of its own that is then removed
    (never in a cell's history/, where spec=auto would read it as an earlier run). The first process after a while
    reads the model and torch's and vLLM's libraries from disk: on a fresh machine (Intel Xeon, avx2 avx512f, 2
    cores) its engine started in 23.6 s, the next job's in 8.5 s, 6 % of a 500-row job. Whichever set-up runs
    first would pay it: with ``--stamp`` resuming a cell after its sweep, that is spec=auto's first round."""
    workload, batch = plan.cells[0]
    rows = 2 * (batch or 16)
    # n-gram: vLLM's n-gram matcher is compiled by numba in each process; its files are read once here too.
    overrides = job_overrides(WORKLOADS[workload], ["spec=ngram"], plan, batch, rows)
    with tempfile.TemporaryDirectory(prefix="specbatch-bench-warm-up-") as scratch:
        log.info("warm-up: one untimed job of %s rows (%s)", rows, workload)
        run_generate(overrides, Path(scratch))


def auto_report(plan: AutoPlan, root: Path, stamp: str) -> tuple[str, Path]:
    """Measure every cell and write the report, rewritten after each cell so that an interrupted invocation leaves
    the cells it finished. An untimed warm-up job comes first (:func:`warm_up`)."""
    path = root / f"auto-{stamp}.md"
    cells: list[Cell] = []
    booted = minutes_since_boot()
    if booted is not None and booted < SETTLE_MINUTES:
        log.warning(
            "this machine booted %.0f min ago: on these machines engine steps ran about 14 %% slower in the first "
            "40-60 min, so the jobs timed before %.0f min are named in the report (a quiet hour's untimed work first, "
            "e.g. jobs/build_head.py, keeps them out)",
            booted,
            SETTLE_MINUTES,
        )
    warm_up(plan)
    for workload, batch in plan.cells:
        where = root / f"auto-{stamp}" / workload / f"batch-{batch_name(batch)}"
        cells.append(measure_cell(plan, workload, batch, where))
        path.write_text(report(plan, stamp, cells))
    return path.read_text(), path
