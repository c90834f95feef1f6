"""(f) Predicted beside measured (issue 27): spec=none, n-gram at several k and suffix, each run for real at batch 1
and at full batch on humaneval_edit and on the two-turn chat file; compare's analysis replays each n-gram and suffix
set-up on its baseline's tokens (analysis/predicted.py) and the report puts predicted AL and speedup beside measured.
Then the replay's own speed: 8 n-gram and 3 suffix set-ups predicted for a 1,000-row run.

With ``--predict-sampling sampled`` every run samples (sampling=sampled) at full batch only: the replay then predicts
a set-up's acceptance in expectation (a deterministic draft is accepted with the target's probability of it, and
spec=none's sampled tokens hit it with that same probability), and the table says how far one run's measured AL is
from it (issue 67)."""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path

from specbatch.analysis.predicted import PredictedRow
from specbatch.analysis.report import Sources, run_compare
from specbatch.bench import machine_header
from specbatch.bench.full_engine import write_two_turn_file
from specbatch.config import compose_job
from specbatch.pipeline import run_job
from specbatch.prediction.figures import OVERALL, predicted_rows
from specbatch.prediction.replay import replay
from specbatch.prediction.setups import NgramSetup, SuffixSetup
from specbatch.prediction.turns import ReplayTurn, read_turns

log = logging.getLogger(__name__)

# (method, k) measured; none first, it is every other set-up's baseline and the run the prediction replays.
CASES = [("none", None), *[("ngram", k) for k in (1, 2, 3, 5, 8)], ("suffix", 5)]
# The goals: |measured AL / predicted AL - 1| and the same for the speedup.
AL_GOALS = {"ngram": 0.01, "suffix": 0.05}
SPEEDUP_GOAL = 0.10
# The replay-speed check: this many rows, these set-ups, under this many seconds.
TIMING_ROWS = 1000
TIMING_SETUPS = [NgramSetup(k, 2, 4) for k in range(1, 9)] + [SuffixSetup(k) for k in (3, 5, 8)]
TIMING_GOAL_SECONDS = 60.0


@dataclasses.dataclass(frozen=True)
class PredictPlan:
    rows: int
    two_turn_rows: int
    max_tokens: int
    # The sampling preset of every run: greedy (both batch sizes) or sampled (full batch only).
    sampling: str = "greedy"

    @property
    def batches(self) -> tuple[tuple[str, str], ...]:
        full = ("engine.max_num_seqs=null", "full")
        return (("engine.max_num_seqs=1", "bs1"), full) if self.sampling == "greedy" else (full,)

    @property
    def tag(self) -> list[str]:
        """The part of run, comparison and report names that sets a sampled bench apart; none for greedy, whose
        names stay as they were."""
        return [] if self.sampling == "greedy" else [self.sampling]

    @property
    def sampled(self) -> list[str]:
        """The sampling override of every run (greedy is the default preset: none)."""
        return [f"sampling={tag}" for tag in self.tag]


def _datasets(plan: PredictPlan, root: Path) -> dict[str, list[str]]:
    two_turn = write_two_turn_file(root / "two_turn_humaneval.jsonl")
    return {
        "humaneval_edit": ["dataset=humaneval_edit", f"max_samples={plan.rows}"],
        "two-turn chat": [
            "dataset=local",
            f"dataset.path={two_turn}",
            "dataset.prompt_format=turns",
            "dataset.turns_column=turns",
            "dataset.id_column=id",
            f"max_samples={plan.two_turn_rows}",
        ],
    }


Measured = dict[str, dict[tuple[str, int | None, str], Path]]


def measure(plan: PredictPlan, root: Path, stamp: str) -> Measured:
    """Every case at batch 1 ("bs1") and at full batch ("full"), per data set, greedy float32 (where greedy is
    batch-invariant enough for n-gram to be exact), or sampled at full batch (PredictPlan.batches); per data set,
    the run folder of each (method, k, batch)."""
    folders: Measured = {}
    for name, data in _datasets(plan, root).items():
        for method, k in CASES:
            spec = [f"spec={method}"] + ([f"spec.num_speculative_tokens={k}"] if k else [])
            for batch, label in plan.batches:
                named = "-".join([label, *plan.tag, stamp])
                overrides = [
                    *data,
                    *spec,
                    batch,
                    "model.dtype=float32",
                    *plan.sampled,
                    f"sampling.max_tokens={plan.max_tokens}",
                    "tracking=off",
                    f"output_root={root}",
                    f"run_name={named}",
                ]
                log.info("(f) %s: %s", name, " ".join(overrides))
                run = run_job(compose_job(overrides))
                folders.setdefault(name, {})[(method, k, label)] = run.folder.root
    return folders


def _off_by(measured: float | None, predicted: float | None) -> float | None:
    return None if not measured or not predicted else measured / predicted - 1


def _verdict(off: float | None, goal: float) -> str:
    return "-" if off is None else f"{off:+.1%} {'met' if abs(off) <= goal else 'MISSED'}"


def predicted_lines(name: str, predicted: list[PredictedRow]) -> list[str]:
    """One data set's table: measured and predicted AL and speedup per set-up and batch size, and each goal. The
    AL range is the AL had every draft token past a completion's end (which the run cannot verify) been rejected,
    and accepted; the prediction estimates them at the acceptance seen elsewhere. The pass cost is r = a + b·d
    decode steps (analysis/predicted.py)."""
    lines = [
        f"### {name}",
        "",
        "| batch | method | k | AL measured | AL predicted | AL range | AL off | speedup measured | speedup predicted "
        "| speedup off | pass cost a + b·d |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in sorted(predicted, key=lambda p: (p.batch_size, p.method, p.k or 0)):
        al_off = _off_by(p.acceptance_length, p.predicted_acceptance_length)
        speed_off = _off_by(p.speedup, p.predicted_speedup)
        low, high = p.predicted_acceptance_length_min, p.predicted_acceptance_length_max
        al_range = "-" if low is None or high is None else f"{low:.3f}–{high:.3f}"
        lines.append(
            f"| {p.batch_size} | {p.method} | {p.k} | {p.acceptance_length or 0:.3f} "
            f"| {p.predicted_acceptance_length:.3f} | {al_range} | {_verdict(al_off, AL_GOALS[p.method])} "
            f"| {p.speedup or 0:.2f} | {p.predicted_speedup or 0:.2f} | {_verdict(speed_off, SPEEDUP_GOAL)} "
            f"| {p.pass_cost} |"
        )
    return lines + [""]


def scaled_turns(turns: list[ReplayTurn], rows: int) -> list[ReplayTurn]:
    """``rows`` completions made from a run's own by repeating them under new row ids, in one shard, in order: the
    replay's work grows with tokens and requests, which this keeps real (suffix's cache sees exact repeats, so its
    AL here is not a figure to quote)."""
    return [
        dataclasses.replace(
            turns[i % len(turns)], row_id=f"{turns[i % len(turns)].row_id}-{i}", position=(0, 0, i), answered=(0, 0, i)
        )
        for i in range(rows)
    ]


def timing_lines(run_root: Path, rows: int = TIMING_ROWS) -> list[str]:
    """The replay's own speed: every set-up of TIMING_SETUPS on ``rows`` completions at the run's batch size."""
    run = read_turns(run_root)
    turns = scaled_turns(run.turns, rows)
    max_model_len = int(run.config["model"]["max_model_len"])
    concurrency = {0: run.concurrency.get(0)}
    replay(turns[:2], TIMING_SETUPS[0], max_model_len)  # numba compiles vLLM's matcher on the first call
    began = time.perf_counter()
    lines = []
    for setup in TIMING_SETUPS:
        start = time.perf_counter()
        overall = next(
            r
            for r in predicted_rows(setup, replay(turns, setup, max_model_len, concurrency))
            if r["category"] == OVERALL
        )
        seconds = time.perf_counter() - start
        lines.append(f"  {setup.label:<26} {seconds:6.2f} s  AL {overall['acceptance_length']:.3f}")
    total = time.perf_counter() - began
    tokens = sum(len(t.completion) for t in turns)
    verdict = "met" if total < TIMING_GOAL_SECONDS else "MISSED"
    return [
        f"## replay speed: {len(TIMING_SETUPS)} set-ups on {rows} completions ({tokens} tokens; made from "
        f"{run_root.name}'s by repetition), at most {concurrency[0]} requests at once",
        "",
        "```",
        *lines,
        f"  total {total:.1f} s (goal < {TIMING_GOAL_SECONDS:.0f} s: {verdict})",
        "```",
    ]


def predict_report(plan: PredictPlan, root: Path, stamp: str) -> tuple[str, Path]:
    """(f): measure, compare (with its predictions), time the replay; the report and where it was written."""
    folders = measure(plan, root, stamp)
    lines = [
        f"# jobs/bench.py --predict, {time.strftime('%Y-%m-%d %H:%M')}",
        machine_header(),
        "",
        f"{plan.sampling}, float32, max_tokens={plan.max_tokens}, default model; humaneval_edit {plan.rows} rows, "
        f"two-turn chat {plan.two_turn_rows} rows (turn 2 asks for type hints on the model's own answer). One run "
        "per set-up and batch size. Predicted: each set-up replayed on spec=none's tokens at the same batch size; "
        "speedup = tau / (a + b·d), the pass cost fitted to the *other* set-ups at that batch size. Goals: AL within "
        f"{AL_GOALS['ngram']:.0%} (n-gram) and {AL_GOALS['suffix']:.0%} (suffix), speedup within {SPEEDUP_GOAL:.0%}"
        + (
            " (greedy's: sampled, the replay predicts AL in expectation and one run's measured AL is one draw of it)."
            if plan.sampled
            else "."
        ),
        "",
    ]
    for name, runs in folders.items():
        out_dir = root / "-".join(["comparison", name.replace(" ", "_"), *plan.tag, stamp])
        result = run_compare(Sources(list(runs.values())), out_dir=out_dir)
        lines += predicted_lines(name, result.comparison.predicted)
        lines += [f"note: {n}" for n in result.comparison.notes if n.startswith("not predicted")]
    lines += timing_lines(folders["humaneval_edit"][("none", None, "full")])
    path = root / f"predict-{'-'.join([*plan.tag, stamp])}.md"
    report = "\n".join(lines)
    path.write_text(report + "\n")
    return report, path
