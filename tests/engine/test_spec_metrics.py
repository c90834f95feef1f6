"""Acceptance arithmetic: counter differences, per-request figures and the summary built from summed counts."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from conftest import fake_engine
from specbatch.backends.vllm.vllm_offline import (
    ACCEPTED_PER_POS,
    GENERATION_TOKENS,
    NUM_ACCEPTED,
    NUM_DRAFT_TOKENS,
    NUM_DRAFTS,
    PROMPT_TOKENS,
    counters_from_metrics,
    row_figures,
)
from specbatch.engine.spec_metrics import (
    Counters,
    RowSpecFigures,
    acceptance_length,
    accepted_per_position_from_histogram,
    histogram_from_accepted_per_position,
)
from specbatch.pipeline import merge_run, run_job
from specbatch.run.summary import RowTotals, merge_summaries, summarize
from specbatch.run.summary_table import format_table


@dataclass
class Counter:  # shaped like vllm.v1.metrics.reader.Counter
    name: str
    value: int


@dataclass
class Vector:  # shaped like vllm.v1.metrics.reader.Vector
    name: str
    values: list[int]


def snapshot(drafts: int, draft_tokens: int, accepted: int, per_pos: list[int], gen: int = 0, prompt: int = 0):
    return [
        Counter(PROMPT_TOKENS, prompt),
        Counter(GENERATION_TOKENS, gen),
        Counter(NUM_DRAFTS, drafts),
        Counter(NUM_DRAFT_TOKENS, draft_tokens),
        Counter(NUM_ACCEPTED, accepted),
        Vector(ACCEPTED_PER_POS, per_pos),
        Counter("vllm:unrelated", 999),
    ]


def test_counter_difference_ignores_what_came_before() -> None:
    before = counters_from_metrics(snapshot(10, 30, 20, [9, 7, 4], gen=50, prompt=100))
    after = counters_from_metrics(snapshot(25, 75, 41, [20, 13, 8], gen=120, prompt=300))
    delta = after - before
    assert delta == Counters(
        prompt_tokens=200,
        generation_tokens=70,
        drafts=15,
        draft_tokens=45,
        accepted_tokens=21,
        accepted_per_position=(11, 6, 4),
    )


def test_counters_sum_over_engines() -> None:
    # Data-parallel engines report one label set each: totals are the sums.
    metrics = snapshot(1, 3, 2, [1, 1, 0]) + snapshot(2, 6, 3, [2, 1, 0])
    counters = counters_from_metrics(metrics)
    assert (counters.drafts, counters.draft_tokens, counters.accepted_tokens) == (3, 9, 5)
    assert counters.accepted_per_position == (3, 2, 0)


def test_baseline_engine_has_no_spec_counters() -> None:
    counters = counters_from_metrics([Counter(GENERATION_TOKENS, 7)])
    assert counters.drafts == 0 and counters.accepted_per_position == ()


def test_histogram_to_positions() -> None:
    # 2 steps accepted nothing, 7 accepted one, 2 accepted two, 7 accepted all three.
    assert accepted_per_position_from_histogram([2, 7, 2, 7]) == [16, 9, 7]
    assert sum(accepted_per_position_from_histogram([2, 7, 2, 7])) == 7 * 1 + 2 * 2 + 7 * 3


def test_row_figures_from_vllm_request_metrics() -> None:
    class Metrics:
        def to_dict(self) -> dict:
            return {
                "mean_acceptance_length": 3.0,
                "draft_acceptance_rate": 0.914,
                "acceptance_histogram": [0, 7, 2, 7],
                "num_spec_steps": 16,
                "num_accepted_draft_tokens": 32,
                "num_draft_tokens": 35,
                "num_spec_tokens": 3,
            }

    class Completion:
        spec_decode_metrics = Metrics()

    figures = row_figures(Completion())
    assert figures == RowSpecFigures(
        spec_steps=16, draft_tokens=35, accepted_tokens=32, acceptance_length=3.0, acceptance_histogram=[0, 7, 2, 7]
    )


def test_acceptance_length_definition() -> None:
    assert acceptance_length(379, 162) == pytest.approx(1 + 379 / 162)
    assert acceptance_length(0, 0) == 1.0


def row(category: str | None, status: str = "ok", **figures) -> dict:
    base = {"category": category, "status": status, "completion_tokens": 0}
    base.update(dict.fromkeys(["spec_steps", "draft_tokens", "accepted_tokens"]))
    base.update(figures)
    return base


def test_counters_add_up_over_calls() -> None:
    one = Counters(generation_tokens=5, drafts=2, draft_tokens=6, accepted_tokens=3, accepted_per_position=(2, 1))
    two = Counters(generation_tokens=7, drafts=1, draft_tokens=3, accepted_tokens=3, accepted_per_position=(1, 1, 1))
    assert one + two == Counters(
        generation_tokens=12, drafts=3, draft_tokens=9, accepted_tokens=6, accepted_per_position=(3, 2, 1)
    )
    assert (one + two) - two == Counters(
        generation_tokens=5, drafts=2, draft_tokens=6, accepted_tokens=3, accepted_per_position=(2, 1, 0)
    )


def test_per_category_figures_sum_to_the_totals() -> None:
    records = [
        row("math", completion_tokens=10, spec_steps=4, draft_tokens=12, accepted_tokens=8),
        row("math", completion_tokens=6, spec_steps=3, draft_tokens=9, accepted_tokens=0),
        row("code", completion_tokens=20, spec_steps=5, draft_tokens=15, accepted_tokens=15),
        row("code", status="error"),
    ]
    delta = Counters(generation_tokens=36, drafts=12, draft_tokens=36, accepted_tokens=23)
    summary = summarize(
        delta,
        method="ngram",
        k=3,
        totals=RowTotals.of(records),
        generation_seconds=1,
        engine_startup_seconds=1,
        warmup_seconds=0,
    )
    assert summary.rows == 4 and summary.error_rows == 1
    cats = summary.per_category
    assert cats["math"] == {
        "rows": 2,
        "error_rows": 0,
        "output_tokens": 16,
        "drafts": 7,
        "draft_tokens": 21,
        "accepted_tokens": 8,
        "mean_acceptance_length": pytest.approx(1 + 8 / 7),
        "draft_acceptance_rate": pytest.approx(8 / 21),
    }
    assert cats["code"]["rows"] == 2 and cats["code"]["error_rows"] == 1
    assert sum(c["output_tokens"] for c in cats.values()) == summary.output_tokens
    assert sum(c["accepted_tokens"] for c in cats.values()) == summary.accepted_tokens
    assert "math" in format_table(summary) and "error rows (not generated)" in format_table(summary)
    assert "per_category" not in summary.scalar_metrics()


def test_summary_uses_summed_counts_not_mean_of_ratios() -> None:
    # Two requests: 1 draft with 3 accepted, 9 drafts with 0 accepted. Mean of row ALs would be (4 + 1) / 2 = 2.5.
    delta = Counters(
        generation_tokens=100, drafts=10, draft_tokens=30, accepted_tokens=3, accepted_per_position=(1, 1, 1)
    )
    summary = summarize(
        delta,
        method="ngram",
        k=3,
        totals=RowTotals.of([row(None), row(None)]),
        generation_seconds=4.0,
        engine_startup_seconds=20.0,
        warmup_seconds=1.0,
    )
    assert summary.mean_acceptance_length == pytest.approx(1.3)
    assert summary.draft_acceptance_rate == pytest.approx(0.1)
    assert summary.acceptance_rate_per_position == pytest.approx([0.1, 0.1, 0.1])
    assert summary.output_tokens_per_second == 25.0
    assert "acceptance_rate_per_position" not in summary.scalar_metrics()
    table = format_table(summary)
    assert re.search(r"mean acceptance length +1\.300\n", table) and re.search(r"output tok/s +25\.000\n", table)


def test_baseline_summary_has_null_acceptance() -> None:
    summary = summarize(
        Counters(generation_tokens=10),
        method="none",
        k=None,
        totals=RowTotals.of([row(None)]),
        generation_seconds=1.0,
        engine_startup_seconds=1.0,
        warmup_seconds=0.0,
    )
    assert summary.drafts is None and summary.mean_acceptance_length is None
    assert summary.acceptance_rate_per_position is None
    assert "mean_acceptance_length" not in summary.scalar_metrics()
    assert re.search(r"drafts \(spec steps\) +-\n", format_table(summary))


def test_shard_summaries_add_up_to_the_summary_of_all_rows() -> None:
    rows_a = [row("math", completion_tokens=10, spec_steps=4, draft_tokens=12, accepted_tokens=8)]
    rows_b = [row("math", completion_tokens=6, spec_steps=3, draft_tokens=9, accepted_tokens=1), row("x", "error")]
    delta_a = Counters(
        prompt_tokens=5,
        generation_tokens=10,
        drafts=4,
        draft_tokens=12,
        accepted_tokens=8,
        accepted_per_position=(4, 3, 1),
    )
    delta_b = Counters(
        prompt_tokens=7, generation_tokens=6, drafts=3, draft_tokens=9, accepted_tokens=1, accepted_per_position=(1,)
    )
    common = {"method": "ngram", "k": 3, "engine_startup_seconds": 1.0, "warmup_seconds": 0.5}
    a = summarize(delta_a, totals=RowTotals.of(rows_a), generation_seconds=2.0, **common)
    b = summarize(delta_b, totals=RowTotals.of(rows_b), generation_seconds=1.0, **common)
    merged = merge_summaries([a, b])
    whole = summarize(
        delta_a + delta_b,
        totals=RowTotals.of(rows_a + rows_b),
        generation_seconds=3.0,
        **{**common, "engine_startup_seconds": 2.0, "warmup_seconds": 1.0},
    )
    assert merged == whole
    assert merged.accepted_per_position == [5, 3, 1] and merged.mean_acceptance_length == pytest.approx(1 + 9 / 7)
    assert merged.per_category["math"]["accepted_tokens"] == 9 and merged.per_category["x"]["error_rows"] == 1


def test_rows_without_a_category_count_as_unknown_so_the_categories_add_up() -> None:
    # A broken line is an error row with no category; an empty category cell is an ok row with none.
    rows_a = [row("math", completion_tokens=10, spec_steps=4, draft_tokens=12, accepted_tokens=8), row(None, "error")]
    rows_b = [row(None, completion_tokens=3, spec_steps=1, draft_tokens=3, accepted_tokens=2), row(None, "error")]
    common = {"method": "ngram", "k": 3, "generation_seconds": 1.0, "engine_startup_seconds": 1.0, "warmup_seconds": 0}
    delta_a = Counters(generation_tokens=10, drafts=4, draft_tokens=12, accepted_tokens=8)
    delta_b = Counters(generation_tokens=3, drafts=1, draft_tokens=3, accepted_tokens=2)
    a = summarize(delta_a, totals=RowTotals.of(rows_a, by_category=True), **common)
    b = summarize(delta_b, totals=RowTotals.of(rows_b, by_category=True), **common)
    assert list(a.per_category) == ["math", "(unknown)"] and list(b.per_category) == ["(unknown)"]
    for summary in (a, b, merge_summaries([a, b])):
        cats = summary.per_category
        assert sum(c["rows"] for c in cats.values()) == summary.rows
        assert sum(c["error_rows"] for c in cats.values()) == summary.error_rows
        assert sum(c["output_tokens"] for c in cats.values()) == summary.output_tokens
        assert sum(c["accepted_tokens"] for c in cats.values()) == summary.accepted_tokens
    merged = merge_summaries([a, b])
    assert merged.per_category["(unknown)"] == {
        "rows": 3,
        "error_rows": 2,
        "output_tokens": 3,
        "drafts": 1,
        "draft_tokens": 3,
        "accepted_tokens": 2,
        "mean_acceptance_length": 3.0,
        "draft_acceptance_rate": pytest.approx(2 / 3),
    }
    assert re.search(r"\n\(unknown\) +3 +2 +3 ", format_table(merged))
    # A run without a category column keeps no per-category figures.
    plain = summarize(delta_b, totals=RowTotals.of(rows_b), **common)
    assert plain.per_category is None and merge_summaries([plain, plain]).per_category is None


def test_a_sharded_run_with_broken_lines_counts_every_row_in_a_category(job_factory, tmp_path: Path) -> None:
    data = tmp_path / "cats.jsonl"
    lines = [
        json.dumps({"id": f"r{i}", "q": f"question {i}", "cat": "even" if i % 2 == 0 else "odd"}) for i in range(5)
    ]
    lines[3] = '{"id": "r3", broken'
    data.write_text("\n".join(lines) + "\n")
    args = ["spec=none", "dataset=local", f"dataset.path={data}", "dataset.template='{q}'", "dataset.id_column=id"]
    args += ["dataset.category_column=cat", "chunk_size=2", "shard.count=2", "tracking.experiment=cats"]
    summaries = []
    for index in range(2):
        job = job_factory(*args, f"shard.index={index}")
        result = run_job(job, engine=fake_engine(job))
        summaries.append(result.summary)
    merged = merge_run(result.folder.root).summary
    assert merged.rows == 5 and merged.error_rows == 1
    assert merged.per_category["(unknown)"]["rows"] == merged.per_category["(unknown)"]["error_rows"] == 1
    for summary in (*summaries, merged):
        assert sum(c["rows"] for c in summary.per_category.values()) == summary.rows
    client = MlflowClient(tracking_uri=job.tracking.uri)
    runs = client.search_runs([client.get_experiment_by_name("cats").experiment_id])
    [parent] = [r for r in runs if r.data.tags.get("merged") == "true"]
    metrics = parent.data.metrics
    assert metrics["category/even/rows"] + metrics["category/odd/rows"] + metrics["category/_unknown_/rows"] == 5


@pytest.mark.parametrize("histogram", [[3, 2, 2, 1], [0, 0, 5], [4], [0, 0, 0, 0], [1, 0, 0, 7, 2]])
def test_the_histogram_and_the_accepted_per_position_give_each_other(histogram: list[int]) -> None:
    # What a profile of the format before the histogram was kept is upgraded with (run.records.profile_file).
    per_position = accepted_per_position_from_histogram(histogram)
    assert histogram_from_accepted_per_position(sum(histogram), per_position) == histogram
