"""speculation_profile.json from output rows (specbatch.run.speculation_profile): the figures add up, per category
too, in the form vLLM's synthetic rejection sampler takes; nothing for runs that did not speculate."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbatch.engine.spec_metrics import Counters
from specbatch.run.records.output_parts import SCHEMA, write_parquet
from specbatch.run.speculation_profile import speculation_profile
from specbatch.run.summary import RowTotals, Summary, summarize

CONFIG = {
    "spec": {"method": "ngram", "num_speculative_tokens": 3},
    "engine": {"backend": "vllm"},
    "model": {"path": "m"},
}


def summary_of(accepted: int, drafted: int, from_a_server: bool = False) -> Summary:
    """The summary of a run whose figures count ``accepted`` of ``drafted`` tokens (4 drafting steps)."""
    counters = Counters(generation_tokens=20, drafts=4, draft_tokens=drafted, accepted_tokens=accepted)
    return summarize(
        counters,
        method="ngram",
        k=3,
        totals=RowTotals(),
        generation_seconds=1.0,
        engine_startup_seconds=0.0,
        warmup_seconds=0.0,
        from_a_server=from_a_server,
    )


ACCEPTED = summary_of(6, 12)


def rows(path: Path, figures: list[tuple[str, str | None, list[int]]]) -> Path:
    """One part: (row id, category, histogram over 0..3 accepted) per row, and an error row."""
    records = [
        dict.fromkeys(SCHEMA.names)
        | {
            "row_id": row_id,
            "turn": 1,
            "sample_index": 0,
            "category": category,
            "status": "ok",
            "method": "ngram",
            "spec_steps": sum(histogram),
            "draft_tokens": 3 * sum(histogram),
            "acceptance_histogram": histogram,
        }
        for row_id, category, histogram in figures
    ]
    records.append(dict.fromkeys(SCHEMA.names) | {"row_id": "bad", "turn": 1, "sample_index": 0, "status": "error"})
    records[-1]["method"] = "ngram"
    write_parquet(records, path, {})
    return path


def test_the_profile_adds_up_per_position_and_per_category(tmp_path: Path) -> None:
    # a: 2 steps, accepted 3 and 1; b: 2 steps, accepted 0 and 2.
    part = rows(tmp_path / "p.parquet", [("a", "edit", [0, 1, 0, 1]), ("b", "chat", [1, 0, 1, 0])])
    profile = speculation_profile([part], CONFIG, ACCEPTED)
    assert profile is not None and (profile["method"], profile["k"], profile["rows"]) == ("ngram", 3, 2)
    assert profile["accepted_per_position"] == [3, 2, 1] and profile["drafts"] == 4
    assert profile["synthetic_acceptance_rates"] == profile["marginal_acceptance"] == [0.75, 0.5, 0.25]
    assert profile["conditional_acceptance"] == pytest.approx([0.75, 2 / 3, 0.5])
    assert profile["acceptance_length"] == pytest.approx(1 + sum(profile["marginal_acceptance"])) == 2.5
    rates = profile["marginal_acceptance"]
    assert all(a >= b for a, b in zip(rates, rates[1:], strict=False))
    assert set(profile["categories"]) == {"edit", "chat"}
    assert profile["categories"]["edit"]["accepted_per_position"] == [2, 1, 1]


def test_no_profile_without_speculation_or_per_row_figures(tmp_path: Path) -> None:
    part = rows(tmp_path / "p.parquet", [("a", None, [0, 1, 0, 1])])
    assert (
        speculation_profile([part], {**CONFIG, "spec": {"method": "none", "num_speculative_tokens": None}}, ACCEPTED)
        is None
    )
    server = rows(tmp_path / "s.parquet", [])
    assert speculation_profile([server], CONFIG, ACCEPTED) is None


def test_no_profile_from_figures_the_summary_refused(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # A server that counted 50 accepted of 12 drafted: its rows' histograms look fine, the summary refused them.
    part = rows(tmp_path / "p.parquet", [("a", "edit", [0, 0, 0, 2]), ("b", "chat", [0, 0, 0, 2])])
    refused = summary_of(50, 12, from_a_server=True)
    assert refused.refused_acceptance() == "the server counted 50 accepted of 12 drafted tokens"
    with caplog.at_level("WARNING"):
        assert speculation_profile([part], CONFIG, refused) is None
    assert "no speculation_profile.json: the summary refused" in caplog.text and "50 accepted of 12" in caplog.text
    # A summary written before the reason was recorded still says it refused them, by its null draft tokens.
    older = Summary(**{key: value for key, value in refused.to_dict().items() if key != "acceptance_doubt"})
    assert older.refused_acceptance() and speculation_profile([part], CONFIG, older) is None
