"""speculation_profile.json from output rows (specbatch.run.speculation_profile): the figures add up, per category
too, in ModelOpt's schema 1.0 with its checks; nothing for runs that did not speculate. Its file
(records.profile_file): read back as written, one of format 1 upgraded, a newer or damaged one refused."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import PROJECT_ROOT
from specbatch.engine.spec_metrics import Counters
from specbatch.run.profile_schema import schema_problems
from specbatch.run.records.output_parts import SCHEMA, write_parquet
from specbatch.run.records.profile_file import read_profile, write_profile
from specbatch.run.records.record_files import RecordError
from specbatch.run.speculation_profile import speculation_profile
from specbatch.run.summary import RowTotals, Summary, summarize

CONFIG = {
    "spec": {"method": "ngram", "num_speculative_tokens": 3},
    "engine": {"backend": "vllm"},
    "model": {"path": "/home/me/models/HuggingFaceTB/SmolLM2-135M-Instruct", "name": "smollm2", "dtype": "float32"},
    "dataset": {"name": "humaneval_edit"},
    "sampling": {"temperature": 0.0, "top_p": 1.0, "top_k": 0, "max_tokens": 16},
}
# Written by main at 58217585, before the profile took ModelOpt's schema (format 1), from the rows of
# test_a_profile_of_format_1_reads_as_todays_writer_writes_it: with CONFIG, its model path then
# "HuggingFaceTB/SmolLM2-135M-Instruct".
FORMAT_1 = PROJECT_ROOT / "tests" / "fixtures" / "speculation_profile_58217585" / "speculation_profile.json"


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
            # The prefill's token, the drafting steps' and one step that drafted nothing.
            "completion_tokens": 1 + sum((j + 1) * n for j, n in enumerate(histogram)) + 1,
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
    assert profile is not None and schema_problems(profile) == []
    assert (profile["schema_version"], profile["measured"], profile["method"]) == ("1.0", True, "ngram")
    assert profile["num_speculative_tokens"] == profile["max_supported_k"] == 3
    # Steps by tokens produced, the bonus token included: 1 accepted none, 1 one, 1 two, 1 three.
    assert profile["acceptance_length_histogram"] == {"1": 1, "2": 1, "3": 1, "4": 1}
    assert profile["marginal_accept_rates"] == [0.75, 0.5, 0.25]
    assert profile["conditional_accept_rates"] == pytest.approx([0.75, 2 / 3, 0.5], abs=1e-6)
    assert profile["mean_accept_length"] == 1 + sum(profile["marginal_accept_rates"]) == 2.5
    assert profile["accept_length_by_k"] == {"3": 2.5}
    # Each request's own AL, a: 1 + 4/2, b: 1 + 2/2, averaged: what ModelOpt keeps beside the per-step mean.
    assert profile["mean_accept_length_per_request"] == 2.5
    assert profile["validation"]["mean_consistency"]["passed"]
    assert profile["validation"]["marginal_monotonicity"] == {"passed": True, "violations": []}
    # n-gram's draft is not a prefix-extension ModelOpt extrapolates over k: measured at each k.
    assert profile["accept_length_model"] == "measured_per_k" and profile["verification_method"] == "longest_prefix"
    assert profile["specbatch"] == {
        "rows": 2,
        "drafts": 4,
        "draft_tokens": 12,
        "accepted_tokens": 6,
        "draft_acceptance_rate": 0.5,
        # 4 drafting steps and one without a draft per row: spec=simulate's draft_coverage.
        "draft_coverage": round(4 / 6, 6),
    }
    # What was measured, without the machine's folders; and under what conditions.
    assert profile["target_model"] == {
        "id": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "name": "smollm2",
        "revision": None,
        "dtype": "float32",
    }
    assert profile["draft_checkpoint"] is None
    assert profile["measurement_conditions"]["engine"] == "vllm"
    assert profile["measurement_conditions"]["dataset"] == "humaneval_edit"
    assert set(profile["per_category"]) == {"edit", "chat"}
    edit = profile["per_category"]["edit"]
    assert edit["marginal_accept_rates"] == [1.0, 0.5, 0.5] and edit["mean_accept_length"] == 3.0
    assert edit["acceptance_length_histogram"] == {"1": 0, "2": 1, "3": 0, "4": 1}
    assert edit["specbatch"]["rows"] == 1


def test_the_check_fails_a_vector_cut_short_of_the_k_that_ran(tmp_path: Path) -> None:
    # Rows that drafted 3 tokens, in a profile that says k=2: its rates miss the third position.
    part = rows(tmp_path / "p.parquet", [("a", None, [0, 1, 0, 3])])
    profile = speculation_profile(
        [part], {**CONFIG, "spec": {"method": "ngram", "num_speculative_tokens": 2}}, ACCEPTED
    )
    check = profile["validation"]["mean_consistency"]
    assert not check["passed"] and check["implied_mean_accept_length"] < check["reported_mean_accept_length"] == 3.5
    assert profile["per_category"] is None


def test_a_draft_checkpoint_is_named_without_the_machines_folders(tmp_path: Path) -> None:
    part = rows(tmp_path / "p.parquet", [("a", None, [0, 1, 0, 1])])
    spec = {"method": "eagle3", "num_speculative_tokens": 3, "model": "/data/heads/yuhuili/EAGLE3-LLaMA3.1"}
    profile = speculation_profile([part], {**CONFIG, "spec": spec}, ACCEPTED)
    assert profile["draft_checkpoint"] == {"id": "yuhuili/EAGLE3-LLaMA3.1", "revision": None}
    # EAGLE3 drafts in a chain: its rates at k give AL at every smaller k (ModelOpt's chain_analytic).
    assert profile["accept_length_model"] == "chain_analytic"


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


def test_a_profile_is_read_back_as_written(tmp_path: Path) -> None:
    part = rows(tmp_path / "p.parquet", [("a", "edit", [0, 1, 0, 1])])
    profile = speculation_profile([part], CONFIG, ACCEPTED)
    write_profile(tmp_path / "speculation_profile.json", profile)
    assert read_profile(tmp_path / "speculation_profile.json") == profile
    assert read_profile(tmp_path / "none.json") is None


def test_a_profile_of_format_1_reads_as_todays_writer_writes_it(tmp_path: Path) -> None:
    old = json.loads(FORMAT_1.read_text())
    assert "schema_version" not in old and old["synthetic_acceptance_rates"] == old["marginal_acceptance"]
    upgraded = read_profile(FORMAT_1)
    assert upgraded is not None and schema_problems(upgraded) == [] and upgraded["measured"]
    part = rows(
        tmp_path / "p.parquet", [("a", "edit", [0, 1, 0, 1]), ("b", "chat", [1, 0, 1, 0]), ("c", "edit", [2, 1, 1, 0])]
    )
    today = speculation_profile([part], CONFIG, ACCEPTED)
    # Every figure as today's writer makes it from the same rows; what format 1 did not record stays null (or, for
    # the share of steps that drafted, absent: a profile without it simulates a drafter at every step).
    not_recorded = {"mean_accept_length_per_request", "target_model", "measurement_conditions"}
    for ours in [today["specbatch"], *(c["specbatch"] for c in today["per_category"].values())]:
        ours.pop("draft_coverage")
    assert {k: v for k, v in upgraded.items() if k not in not_recorded} == {
        k: v for k, v in today.items() if k not in not_recorded
    }
    assert upgraded["mean_accept_length_per_request"] is None
    assert upgraded["target_model"] == {"id": "HuggingFaceTB/SmolLM2-135M-Instruct"}
    assert upgraded["measurement_conditions"] == {"engine": "vllm"}
    assert upgraded["marginal_accept_rates"] == pytest.approx(old["marginal_acceptance"], abs=1e-6)
    assert upgraded["mean_accept_length"] == pytest.approx(old["acceptance_length"])
    # Read, not rewritten.
    assert json.loads(FORMAT_1.read_text()) == old


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ({"schema_version": "2.0"}, "schema 2.0 (this version reads 1.x)"),
        ({"format": 3, "schema_version": "1.0"}, "speculation profile format 3"),
        ({"schema_version": "1.0", "measured": 1}, "measured is 1, not true or false"),
        ("[1, 2]", "not a JSON object"),
        ('{"schema_ver', "not JSON"),
        ({}, "damaged (it lacks schema_version)"),
        ({"method": "ngram", "k": 3}, "damaged (it lacks drafts, accepted_per_position)"),
    ],
)
def test_a_newer_or_damaged_profile_is_refused_naming_the_file(tmp_path: Path, content: object, says: str) -> None:
    path = tmp_path / "speculation_profile.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    with pytest.raises(RecordError, match=re.escape(says)) as refused:
        read_profile(path)
    assert str(path) in str(refused.value)
