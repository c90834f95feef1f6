"""jobs/bench.py --auto's table and goals, on made-up measurements (no engine)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from specbatch.bench import auto_bench
from specbatch.bench.auto_bench import (
    DEFAULT_BATCHES,
    WORKLOADS,
    AutoPlan,
    Cell,
    Measured,
    ahead_line,
    batch_list,
    report,
    run_one,
    summary_lines,
)
from specbatch.bench.full_engine import Throughput


def measured(setup: str, tok_s: float, decision: dict | None = None) -> Measured:
    """A job of 1,000 output tokens whose wall time gives ``tok_s``; its generation took 80 % of that."""
    wall = 1000 / tok_s
    return Measured(setup, Throughput(32, 1000, 0.8 * wall, wall), 5.0, decision)


def cell(workload: str, batch: int | None, rates: dict[str, list[float]], picks: list[dict] | None = None) -> Cell:
    picks = picks or [{"winner": "none"}] * len(rates["auto"])
    results = {
        s: [measured(s, r, picks[i] if s == "auto" else None) for i, r in enumerate(runs)] for s, runs in rates.items()
    }
    return Cell(workload, batch, results)


def test_the_goals_are_judged_on_medians_of_whole_job_rates() -> None:
    c = cell("chat", 16, {"none": [100, 300, 110], "ngram-k1": [130, 120, 125], "auto": [120, 121, 500]})
    assert [c.rate(s) for s in ("none", "ngram-k1", "auto")] == pytest.approx([110, 125, 121])
    assert c.best == "ngram-k1"
    assert c.vs_best == pytest.approx(121 / 125) and c.vs_none == pytest.approx(121 / 110)
    assert c.best_goal is True  # 0.968 >= 0.95
    assert c.none_goal is None, "none is not the best: goal 2 does not apply"
    # Generation seconds are not what the goals read: the whole job's wall time is.
    assert measured("none", 100).figures.tokens_per_second == pytest.approx(125)


def test_where_none_is_best_auto_must_reach_097_of_it() -> None:
    close = cell("humaneval", None, {"none": [200], "ngram-k3": [190], "auto": [195]})
    assert close.best == "none" and close.best_goal and close.none_goal is True  # 0.975
    short = cell("humaneval", None, {"none": [200], "ngram-k3": [190], "auto": [192]})
    assert short.best_goal and short.none_goal is False  # 0.96: meets 0.95 of the best, misses 0.97 of none
    lines = summary_lines([short])
    assert "- goal missed: humaneval at batch full: auto / none 0.960 < 0.97 (none is best)" in lines


def test_the_table_has_one_row_per_cell_and_lists_the_misses() -> None:
    cells = [
        cell("humaneval_edit", None, {"none": [100], "ngram-k3": [104], "auto": [106]}),
        cell("humaneval_edit", 4, {"none": [50], "ngram-k3": [80], "auto": [70]}),
    ]
    lines = summary_lines(cells)
    assert lines[0].startswith("| workload | batch | none tok/s | best fixed | best tok/s | auto tok/s |")
    assert lines[2] == (
        "| humaneval_edit | full | 100.0 | ngram-k3 | 104.0 | 106.0 | 1.019 | 1.060 | none | met | n/a |"
    )
    assert lines[3] == "| humaneval_edit | 4 | 50.0 | ngram-k3 | 80.0 | 70.0 | 0.875 | 1.400 | none | MISSED | n/a |"
    assert lines[5:] == [
        "- goal missed: humaneval_edit at batch 4: auto / best (ngram-k3) 0.875 < 0.95",
        "- auto ahead of the best fixed set-up at full batch: yes, humaneval_edit (1.019 x ngram-k3)",
    ]
    met = summary_lines(cells[:1])
    assert "- goals 1 and 2 met in every cell" in met


def test_goal_three_says_no_with_the_closest_full_batch_cell_and_ignores_smaller_batches() -> None:
    cells = [
        cell("humaneval", None, {"none": [100], "auto": [99]}),
        cell("chat", None, {"none": [100], "ngram-k1": [90], "auto": [99.5]}),
        cell("chat", 16, {"none": [100], "auto": [150]}),
    ]
    assert ahead_line(cells) == "auto ahead of the best fixed set-up at full batch: no (closest: chat (0.995 x none))"
    assert "not measured" in ahead_line(cells[2:])


def test_what_auto_chose_prefers_the_caption_and_counts_differing_repeats() -> None:
    schedule = {"winner": "ngram-k3", "winner_caption": "ngram, k 3 below batch 8, 1 up to 32, off above"}
    same = cell("chat", 4, {"none": [1, 1], "auto": [1, 1]}, [schedule, schedule])
    assert same.chose == "ngram, k 3 below batch 8, 1 up to 32, off above"
    mixed = cell("chat", 4, {"none": [1] * 3, "auto": [1] * 3}, [{"winner": "none"}, schedule, {"winner": "none"}])
    assert mixed.chose == "none (2x), ngram, k 3 below batch 8, 1 up to 32, off above (1x)"
    assert cell("chat", 4, {"none": [1], "auto": [1]}, [{}]).chose == "no decision"


def test_without_none_among_the_setups_auto_over_none_is_left_out() -> None:
    c = cell("chat", 4, {"ngram-k1": [100], "auto": [100]})
    assert c.vs_none is None and c.none_goal is None
    assert summary_lines([c])[2] == "| chat | 4 | - | ngram-k1 | 100.0 | 100.0 | 1.000 | - | none | met | n/a |"


def test_the_report_keeps_the_machine_header_and_each_cells_runs() -> None:
    plan = AutoPlan(["chat"], ["none"], 32, 128, 1, (16,))
    text = report(plan, "STAMP", [cell("chat", 16, {"none": [100], "auto": [95]})])
    lines = text.splitlines()
    assert lines[0] == "# spec=auto against the fixed set-ups (STAMP)" and lines[2].startswith("machine: ")
    assert "32 rows; medians of 1 run(s)" in lines[3]
    assert "### chat, engine.max_num_seqs=16" in lines
    assert "| none | 100.0 | 100.0 | 125.0 | 10.0 | 8.0 | 5.0 |" in lines


def test_flags_default_to_three_workloads_three_batches_and_three_repeats() -> None:
    assert list(WORKLOADS) == ["humaneval_edit", "humaneval", "chat"] and WORKLOADS["chat"] == ["dataset=chat"]
    assert batch_list(DEFAULT_BATCHES) == (None, 16, 4)
    assert batch_list("4, full,4") == (4, None)
    with pytest.raises(argparse.ArgumentTypeError, match="'x' is neither 'full' nor a batch size"):
        batch_list("full,x")
    args = argparse.Namespace(
        setups="none,ngram-k1", auto_batches=(16,), workloads="chat", rows=32, auto_max_tokens=128, repeats=1
    )
    assert AutoPlan.from_args(args) == AutoPlan(["chat"], ["none", "ngram-k1"], 32, 128, 1, (16,))
    with pytest.raises(ValueError, match="--workloads: mt unknown; choose from humaneval_edit, humaneval, chat"):
        AutoPlan.from_args(argparse.Namespace(**{**vars(args), "workloads": "chat,mt"}))


def test_a_job_measured_before_is_read_not_run_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = measured("auto", 120, {"winner": "none", "winner_caption": "none"})
    (tmp_path / auto_bench.MEASURED_FILE).write_text(json.dumps(before.to_dict()))
    monkeypatch.setattr(auto_bench, "run_generate", lambda *a, **k: pytest.fail("ran the job again"))
    plan = AutoPlan(["chat"], ["none"], None, 128, 1)
    assert run_one("auto", WORKLOADS["chat"], plan, tmp_path, 16) == before


def test_a_job_stopped_part_way_is_measured_again_from_the_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    partial = tmp_path / "auto-rep0" / "runs" / "chat" / "part-0.parquet"
    partial.parent.mkdir(parents=True)
    partial.write_text("half a job")

    def generate(overrides: list[str], output_root: Path) -> None:
        assert not partial.exists(), "its wall time would cover only the rest"
        assert output_root == tmp_path / "auto-rep0" and "engine.max_num_seqs=4" in overrides
        raise RuntimeError("stopped here")

    monkeypatch.setattr(auto_bench, "run_generate", generate)
    with pytest.raises(RuntimeError, match="stopped here"):
        run_one("auto", WORKLOADS["chat"], AutoPlan(["chat"], [], None, 128, 1), tmp_path / "auto-rep0", 4)
