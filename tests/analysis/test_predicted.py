"""compare puts replay's prediction beside each measured n-gram set-up (analysis/predicted.py): AL from replaying
the set-up on the baseline's tokens, speedup from it and a draft token's cost read off the *other* set-ups measured
at the same batch size."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from specbatch.analysis.compare import compare
from specbatch.analysis.predicted import cost_model
from specbatch.analysis.run_data import load_run
from specbatch.analysis.tables import format_comparison
from specbatch.common.atomic_files import atomic_write_json, atomic_write_text
from specbatch.config import to_plain_dict
from specbatch.engine.spec_metrics import Counters
from specbatch.prediction.replay import Drafting, replay
from specbatch.prediction.setups import NgramSetup
from specbatch.prediction.turns import read_turns
from specbatch.run.folder import RunFolder
from specbatch.run.records.output_parts import SCHEMA, write_parquet
from specbatch.run.records.run_json import RUN_FORMAT
from specbatch.run.summary import RowTotals, summarize

# Two rows whose answers repeat their prompts: n-gram drafts from them.
PROMPTS = {"r0": [1, 2, 3, 4, 5, 6, 7, 8], "r1": [9, 10, 11, 12, 13, 14, 15, 16]}
ANSWERS = {"r0": [1, 2, 3, 4, 5, 6, 7, 99], "r1": [9, 10, 11, 12, 13, 14, 15, 16]}
OUTPUT = sum(len(a) for a in ANSWERS.values())


def write_run(
    job_factory, tok_per_s: float, accepted: int, draft_tokens: int, *overrides: str, prompt_ids: bool = True
) -> Path:
    """A finished run of both rows (the same answers: greedy and lossless) with the given throughput and counters;
    ``prompt_ids=False``: its rows as written before output schema 4."""
    job = job_factory("tracking=off", "model.dtype=float32", "engine.max_num_seqs=2", *overrides)
    layout = RunFolder.for_job(job)
    method, k = job.spec.method.value, job.spec.k
    config = to_plain_dict(job)
    atomic_write_json(layout.run_json, {"format": RUN_FORMAT, "config": config, "shard_count": 1})
    rows = [
        dict.fromkeys(SCHEMA.names)
        | {"row_id": row, "turn": 1, "sample_index": 0, "status": "ok", "method": method}
        | {"prompt_token_ids": PROMPTS[row] if prompt_ids else None}
        | {"completion_token_ids": answer, "completion_tokens": len(answer)}
        for row, answer in ANSWERS.items()
    ]
    write_parquet(rows, layout.part_path(0), config)
    counters = Counters(10, OUTPUT)
    if k:
        counters = Counters(10, OUTPUT, drafts=4, draft_tokens=draft_tokens, accepted_tokens=accepted)
    summary = summarize(
        counters,
        method=method,
        k=k,
        totals=RowTotals(rows=2),
        generation_seconds=OUTPUT / tok_per_s,
        engine_startup_seconds=1.0,
        warmup_seconds=0.0,
        concurrency=2,
    )
    atomic_write_json(layout.stats_path, summary.to_dict())
    atomic_write_text(layout.done_marker, "done\n")
    return layout.root


def test_each_ngram_set_up_gets_its_replayed_al_and_a_speedup_from_the_others_cost(job_factory) -> None:
    base = write_run(job_factory, 10.0, 0, 0, "spec=none")
    k2 = write_run(job_factory, 20.0, 8, 8, "spec=ngram", "spec.num_speculative_tokens=2")
    k3 = write_run(job_factory, 24.0, 10, 12, "spec=ngram", "spec.num_speculative_tokens=3")
    comparison = compare([load_run(base), load_run(k2), load_run(k3)])
    predicted = {p.k: p for p in comparison.predicted}
    assert set(predicted) == {2, 3}

    def cost(speedup: float, accepted: int, drafted: int) -> float:
        tau = OUTPUT / (OUTPUT - accepted)  # tokens per pass, from the run's own counters
        return (tau / speedup - 1) / (drafted / (OUTPUT - accepted))

    turns = read_turns(base)
    for k, other in ((2, cost(2.4, 10, 12)), (3, cost(2.0, 8, 8))):
        total = Drafting()
        for _, figures in replay(turns.turns, NgramSetup(k, 2, 4), 2048):
            total.add(figures)
        passes = OUTPUT - total.accepted
        assert predicted[k].predicted_acceptance_length == pytest.approx(1 + total.accepted / total.drafts)
        assert predicted[k].draft_token_cost == pytest.approx(other)  # the other set-up's, never its own
        expected = (OUTPUT / passes) / (1 + other * total.draft_tokens / passes)
        assert predicted[k].predicted_speedup == pytest.approx(expected)
    assert "measured ÷ predicted" in format_comparison(comparison)
    assert comparison.to_dict()["predicted"][0]["method"] == "ngram"


def test_alone_at_its_batch_size_only_al_is_predicted(job_factory) -> None:
    base = write_run(job_factory, 10.0, 0, 0, "spec=none")
    k2 = write_run(job_factory, 20.0, 8, 8, "spec=ngram", "spec.num_speculative_tokens=2")
    [alone] = compare([load_run(base), load_run(k2)]).predicted
    assert alone.predicted_acceptance_length > 1 and alone.predicted_speedup is None and alone.draft_token_cost is None


def test_a_baseline_without_prompt_token_ids_is_named_not_predicted(job_factory) -> None:
    base = write_run(job_factory, 10.0, 0, 0, "spec=none", prompt_ids=False)
    k2 = write_run(job_factory, 20.0, 8, 8, "spec=ngram", "spec.num_speculative_tokens=2")
    comparison = compare([load_run(base), load_run(k2)])
    assert comparison.predicted == []
    [note] = [n for n in comparison.notes if n.startswith("not predicted:")]
    assert str(base) in note and "written before output schema 4" in note


def test_the_pass_cost_is_a_line_through_three_or_more_set_ups_and_through_1_with_fewer() -> None:
    # Turning speculation on costs half a step whatever is drafted, and each draft token 0.3 of one.
    on_a_line = [(1.0, 1.8), (2.0, 2.1), (4.0, 2.7)]
    assert cost_model(on_a_line) == pytest.approx((1.5, 0.3))
    # Two set-ups cannot tell an offset from a slope: the line through r(0) = 1, c their median.
    assert cost_model(on_a_line[:2]) == pytest.approx((1.0, statistics.median([0.8, 0.55])))
    # A falling cost is noise (a draft token never makes a pass cheaper): the line through 1 again.
    assert cost_model([(1.0, 2.0), (2.0, 1.9), (3.0, 1.8)])[0] == 1.0
    assert cost_model([]) is None
