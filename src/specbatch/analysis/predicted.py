"""Predicted beside measured, in a comparison: every n-gram and suffix set-up compare measured on vLLM is replayed
on its baseline's token ids (specbatch.prediction), for its predicted AL and speedup.

The speedup model: a target pass emits 1 + accepted tokens (tokens per pass, tau = output / (output - accepted)),
and a pass that verifies d draft tokens per request costs (1 + gamma * d) times a pass of spec=none at the same batch
size. So speedup = tau / (1 + gamma * d). gamma, the cost of one draft token relative to a plain decode step on this
machine at this batch size (drafting included), is read off the other set-ups measured at the same batch size
(each gives gamma = (tau / speedup - 1) / d from its own counters; their median), never off the set-up being
predicted. With no other set-up measured there, only AL is predicted."""

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
    # The step cost used (None: no other set-up measured at this batch size).
    draft_token_cost: float | None
    run_folders: list[str]


def _measured_speedup(row: CompareRow) -> float | None:
    """The speedup the recommendation reads (over the baseline's median), or the mean's without repeats."""
    return row.speedup_median or row.speedup


def _draft_token_cost(row: CompareRow) -> float | None:
    """gamma from a measured row's own figures: tau / speedup = 1 + gamma * d, d = draft tokens per pass."""
    tau, rate, speedup = row.tokens_per_pass, row.draft_acceptance_rate, _measured_speedup(row)
    if not tau or not rate or not speedup or tau <= 1:
        return None
    return (tau / speedup - 1) / ((tau - 1) / rate)


def _speed_inputs(turns: RunTurns, replayed: list[tuple[object, Drafting]]) -> tuple[float, float, float]:
    """(AL, tokens per pass, draft tokens per pass) of a replay."""
    total = Drafting()
    for _, figures in replayed:
        total.add(figures)
    output = sum(len(t.completion) for t in turns.turns)
    passes = output - total.accepted
    al = 1 + total.accepted / total.drafts if total.drafts else 1.0
    return al, output / passes, total.draft_tokens / passes


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
    # Each candidate's own draft token cost, once: every other one at its batch size reads it.
    own_cost = {id(row): _draft_token_cost(row) for row, _, _ in candidates}
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
        al, tau, drafted = _speed_inputs(run, replay(run.turns, setup, max_model_len, run.concurrency))
        costs = [
            own_cost[id(other)]
            for other, _, _ in candidates
            if other is not row
            and (other.workload, other.batch_size) == (row.workload, row.batch_size)
            and own_cost[id(other)] is not None
        ]
        cost = statistics.median(costs) if costs else None
        out.append(
            PredictedRow(
                dataset=row.dataset,
                batch_size=row.batch_size,
                method=row.method,
                k=row.k,
                acceptance_length=row.mean_acceptance_length,
                predicted_acceptance_length=al,
                speedup=_measured_speedup(row),
                predicted_speedup=tau / (1 + cost * drafted) if cost is not None else None,
                draft_token_cost=cost,
                run_folders=row.run_folders,
            )
        )
    return out, notes
