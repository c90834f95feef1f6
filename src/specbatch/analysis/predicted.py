"""Predicted beside measured, in a comparison: every n-gram and suffix set-up compare measured on vLLM is replayed
on its baseline's token ids (specbatch.prediction), for its predicted AL and speedup.

The speedup model: a target pass emits 1 + accepted tokens (tokens per pass, tau = output / (output - accepted)),
and a pass that verifies d draft tokens per request costs r(d) plain decode steps of spec=none at the same batch size,
so speedup = tau / r(d). Each measured set-up gives its own point (d, r = tau / speedup) from its counters; r is read
off the *other* set-ups measured at the same batch size, never off the one being predicted:
- three or more others at two or more d: a line r = a + b * d through them (least squares; unless a < 1 or b < 0,
  which no pass costs: then as with fewer). a - 1 is what turning speculation on costs a pass whatever it drafts
  (the proposer, verifying and sampling over more positions): on 2 CPU cores at full batch jobs/bench.py --predict
  fitted a = 1.33-1.44, which a line through r(0) = 1 cannot follow (mean error at full batch 6.0 % and 6.4 % with
  it, 5.3 % and 2.6 % with the line; the same at batch 1, where a is about 1);
- fewer: r = 1 + c * d, c the median of the others' (r - 1) / d.
With no other set-up measured there, only AL is predicted."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from specbatch.analysis.comparison_rows import CompareRow
from specbatch.analysis.run_data import RunData
from specbatch.engine import recorded_backend
from specbatch.prediction.replay import Drafting, replay
from specbatch.prediction.setups import setup_of
from specbatch.prediction.turns import NoTokenIds, RunTurns, read_turns
from specbatch.run.folder import read_run


@dataclass(frozen=True)
class PredictedRow:
    """One measured set-up with what replay predicted for it."""

    dataset: str
    batch_size: int
    method: str
    k: int | None
    acceptance_length: float | None
    predicted_acceptance_length: float
    speedup: float | None
    predicted_speedup: float | None
    # The step cost used: r = (1 + speculation_overhead) + draft_token_cost * d decode steps per pass (None: no other
    # set-up measured at this batch size; overhead 0.0 where too few were for a line).
    draft_token_cost: float | None
    run_folders: list[str]
    speculation_overhead: float | None = None
    # AL had every draft token past a completion's end (which the run cannot verify) been rejected, and accepted:
    # the engine's AL lies between them; predicted_acceptance_length estimates those tokens at the acceptance seen.
    predicted_acceptance_length_min: float | None = None
    predicted_acceptance_length_max: float | None = None

    @property
    def pass_cost(self) -> str:
        """The cost model used, as tables write it: ``1.50 + 0.30·d`` decode steps per pass, or ``-``."""
        if self.draft_token_cost is None:
            return "-"
        return f"{1 + (self.speculation_overhead or 0):.2f} + {self.draft_token_cost:.2f}·d"


def _measured_speedup(row: CompareRow) -> float | None:
    """The speedup the recommendation reads (over the baseline's median), or the mean's without repeats."""
    return row.speedup_median or row.speedup


def _pass_cost(row: CompareRow) -> tuple[float, float] | None:
    """(d, r) of a measured row from its own figures: draft tokens per pass, and what a pass cost in decode steps
    of spec=none (tau / speedup)."""
    tau, rate, speedup = row.tokens_per_pass, row.draft_acceptance_rate, _measured_speedup(row)
    if not tau or not rate or not speedup or tau <= 1:
        return None
    return (tau - 1) / rate, tau / speedup


def cost_model(points: list[tuple[float, float]]) -> tuple[float, float] | None:
    """(a, b) with r(d) = a + b * d from the (d, r) of measured set-ups (module docstring); None without any."""
    if not points:
        return None
    if len(points) >= 3 and len({d for d, _ in points}) >= 2:
        mean_d = statistics.fmean(d for d, _ in points)
        mean_r = statistics.fmean(r for _, r in points)
        slope = sum((d - mean_d) * (r - mean_r) for d, r in points) / sum((d - mean_d) ** 2 for d, _ in points)
        offset = mean_r - slope * mean_d
        # A draft token never makes a pass cheaper, nor does turning speculation on: below either is noise (or a
        # line pulled by set-ups far from this one): fall back.
        if slope >= 0 and offset >= 1:
            return offset, slope
    return 1.0, statistics.median((r - 1) / d for d, r in points)


@dataclass(frozen=True)
class SpeedInputs:
    """What the speedup model reads of a replay (the estimate counts the unverified draft tokens the engine is
    expected to have accepted, as its own counters count them): AL estimated, with every unverified token rejected
    and with every one accepted; tokens per target pass; draft tokens per pass."""

    acceptance_length: float
    acceptance_length_min: float
    acceptance_length_max: float
    tokens_per_pass: float
    drafted_per_pass: float


def speed_inputs(turns: RunTurns, replayed: list[tuple[object, Drafting]]) -> SpeedInputs:
    total = Drafting()
    for _, figures in replayed:
        total.add(figures)
    output = sum(len(t.completion) for t in turns.turns)
    accepted = total.accepted + total.expected_unverified_accepted()
    passes = output - accepted
    drafts = max(1, total.drafts)
    return SpeedInputs(
        acceptance_length=1 + accepted / drafts,
        acceptance_length_min=1 + total.accepted / drafts,
        acceptance_length_max=1 + (total.accepted + total.unverified) / drafts,
        tokens_per_pass=output / passes,
        drafted_per_pass=total.draft_tokens / passes,
    )


def predicted_rows(
    rows: list[CompareRow], baselines: dict[tuple[str, int], list[RunData]]
) -> tuple[list[PredictedRow], list[str]]:
    """The predicted rows of a comparison's rows, and notes on the set-ups that could not be predicted."""
    candidates = []
    for row in rows:
        base = baselines.get((row.workload, row.batch_size))
        config = read_run(Path(row.run_folders[0]))["config"]
        setup = setup_of(config) if recorded_backend(config).drafts_as_vllm else None
        if base is not None and setup is not None:
            candidates.append((row, setup, base[0]))
    # Each candidate's own (d, r), once: every other one at its batch size reads it.
    own_cost = {id(row): _pass_cost(row) for row, _, _ in candidates}
    notes: list[str] = []
    turns: dict[Path, RunTurns | None] = {}
    out = []
    for row, setup, baseline in candidates:
        if baseline.root not in turns:
            try:
                turns[baseline.root] = read_turns(baseline.root)
            except NoTokenIds as exc:
                turns[baseline.root] = None
                notes.append(f"not predicted: {exc}")
        run = turns[baseline.root]
        if run is None:
            continue
        max_model_len = int(run.config["model"]["max_model_len"])
        inputs = speed_inputs(run, replay(run.turns, setup, max_model_len, run.concurrency))
        points = [
            point
            for other, _, _ in candidates
            if other is not row
            and (other.workload, other.batch_size) == (row.workload, row.batch_size)
            and (point := own_cost[id(other)]) is not None
        ]
        model = cost_model(points)
        out.append(
            PredictedRow(
                dataset=row.dataset,
                batch_size=row.batch_size,
                method=row.method,
                k=row.k,
                acceptance_length=row.mean_acceptance_length,
                predicted_acceptance_length=inputs.acceptance_length,
                speedup=_measured_speedup(row),
                predicted_speedup=(
                    inputs.tokens_per_pass / (model[0] + model[1] * inputs.drafted_per_pass) if model else None
                ),
                draft_token_cost=model[1] if model else None,
                run_folders=row.run_folders,
                speculation_overhead=model[0] - 1 if model else None,
                predicted_acceptance_length_min=inputs.acceptance_length_min,
                predicted_acceptance_length_max=inputs.acceptance_length_max,
            )
        )
    return out, notes
