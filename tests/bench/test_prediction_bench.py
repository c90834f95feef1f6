"""jobs/bench.py --predict's report logic (specbatch.bench.prediction_bench): each goal judged on the right figure,
the 1,000-row timing input made of distinct requests, and the runs a sampled bench asks for."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from specbatch.analysis.predicted import PredictedRow
from specbatch.bench import prediction_bench
from specbatch.bench.prediction_bench import PredictPlan, predicted_lines, scaled_turns
from specbatch.prediction.turns import ReplayTurn


def _row(method: str, al: float, predicted_al: float, speedup: float | None, predicted: float | None) -> PredictedRow:
    return PredictedRow(
        dataset="humaneval_edit",
        batch_size=1,
        method=method,
        k=3,
        acceptance_length=al,
        predicted_acceptance_length=predicted_al,
        speedup=speedup,
        predicted_speedup=predicted,
        draft_token_cost=0.1 if predicted else None,
        run_folders=[],
        speculation_overhead=0.5 if predicted else None,
        predicted_acceptance_length_min=predicted_al - 0.1,
        predicted_acceptance_length_max=predicted_al + 0.1,
    )


def test_goals_are_judged_per_method_and_on_the_speedup():
    lines = predicted_lines(
        "humaneval_edit",
        [
            _row("ngram", 3.02, 3.0, 2.0, 2.1),  # AL 0.7 % off: met for n-gram; speedup 4.8 % off: met
            _row("suffix", 3.12, 3.0, 2.0, 2.5),  # AL 4 % off: met for suffix; speedup 20 % off: missed
            _row("ngram", 3.06, 3.0, None, None),  # AL 2 % off: missed for n-gram; nothing measured to judge
        ],
    )
    ngram, ngram_off, suffix = (line for line in lines if line.startswith("| 1 |"))
    assert "+0.7% met" in ngram and "-4.8% met" in ngram
    assert "+4.0% met" in suffix and "-20.0% MISSED" in suffix
    assert "+2.0% MISSED" in ngram_off and ngram_off.rstrip(" |").endswith("| -")
    assert "| 1.50 + 0.10·d |" in ngram and "| 2.900–3.100 |" in ngram


def test_scaled_turns_are_distinct_requests_in_one_shard():
    base = [
        ReplayTurn(f"r{i}", 0, 0, None, np.arange(3), np.arange(4) + i, position=(1, 0, i), answered=(1, 0, i))
        for i in range(3)
    ]
    turns = scaled_turns(base, 10)
    assert len({t.key for t in turns}) == 10
    assert [t.position for t in turns] == [(0, 0, i) for i in range(10)]
    assert [t.completion[0] for t in turns] == [i % 3 for i in range(10)]


def test_a_sampled_prediction_bench_samples_every_run_at_full_batch_in_runs_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--predict-sampling sampled: each case once at full batch with sampling=sampled, named apart from the greedy
    runs of the same stamp (the greedy bench keeps both batch sizes and its run names)."""
    asked: list[list[str]] = []

    def run_job(job: object) -> SimpleNamespace:
        return SimpleNamespace(folder=SimpleNamespace(root=tmp_path / str(len(asked))))

    monkeypatch.setattr(prediction_bench, "compose_job", lambda overrides: asked.append(overrides) or overrides)
    monkeypatch.setattr(prediction_bench, "run_job", run_job)
    monkeypatch.setattr(prediction_bench, "write_two_turn_file", lambda path: path)
    sampled = prediction_bench.measure(PredictPlan(8, 4, 16, "sampled"), tmp_path, "S")
    assert len(asked) == 2 * len(prediction_bench.CASES)
    assert all("sampling=sampled" in o and "engine.max_num_seqs=null" in o for o in asked)
    assert {o[-1] for o in asked} == {"run_name=full-sampled-S"}
    assert set(sampled["humaneval_edit"]) == {(m, k, "full") for m, k in prediction_bench.CASES}
    asked.clear()
    prediction_bench.measure(PredictPlan(8, 4, 16), tmp_path, "S")
    assert len(asked) == 4 * len(prediction_bench.CASES) and not any("sampling=sampled" in o for o in asked)
    assert {o[-1] for o in asked} == {"run_name=bs1-S", "run_name=full-S"}
