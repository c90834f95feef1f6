"""jobs/bench.py --auto's goals per cell and its table, on made-up measurements (no engine)."""

from __future__ import annotations

import pytest

from specbatch.bench.auto_cells import Cell, Measured, cell_lines, summary_lines
from specbatch.bench.full_engine import Throughput


def measured(setup: str, tok_s: float, decision: dict | None = None) -> Measured:
    """A job of 1,000 output tokens whose wall time gives ``tok_s``; its generation took 80 % of that."""
    wall = 1000 / tok_s
    return Measured(setup, Throughput(32, 1000, 0.8 * wall, wall), 5.0, decision)


def cell(rates: dict[str, list[float]], picks: list[str] | None = None, batch: int | None = 16) -> Cell:
    picks = picks or ["none"] * len(rates["auto"])
    results = {
        s: [measured(s, r, {"winner": picks[i]} if s == "auto" else None) for i, r in enumerate(runs)]
        for s, runs in rates.items()
    }
    return Cell("helpdesk", batch, results, {"ngram-k3": 120.0, "suffix-k5": 90.0})


def test_the_goals_are_judged_on_medians_of_whole_job_rates() -> None:
    c = cell(
        {"auto": [118, 119, 500], "none": [100, 300, 110], "ngram-k3": [122, 121, 125], "suffix-k5": [90, 91, 92]},
        ["ngram-k3"] * 3,
    )
    assert [c.rate(s) for s in ("none", "ngram-k3", "auto")] == pytest.approx([110, 122, 119])
    assert c.best == "ngram-k3" and c.choice == pytest.approx(1.0)
    # Auto's wall over its choice's median wall, per repeat: 122/118 - 1, 122/119 - 1, 122/500 - 1; the median.
    assert c.cost == pytest.approx(122 / 119 - 1)
    assert c.goals() == {"choice": True, "cost": True, "none": None, "best": True}
    # Generation seconds are not what the goals read: the whole job's wall time is.
    assert measured("none", 100).figures.tokens_per_second == pytest.approx(125)


def test_a_wrong_choice_and_a_costly_one_are_each_missed() -> None:
    wrong = cell({"auto": [100], "none": [100], "ngram-k3": [130], "suffix-k5": [101]}, ["suffix-k5"])
    assert wrong.choice == pytest.approx(101 / 130) and wrong.goals()["choice"] is False
    costly = cell({"auto": [120], "none": [100], "ngram-k3": [130]}, ["ngram-k3"])
    assert costly.choice == 1.0 and costly.cost == pytest.approx(130 / 120 - 1)
    assert costly.goals() == {"choice": True, "cost": False, "none": None, "best": False}  # 0.923
    lines = summary_lines([wrong, costly])
    assert (
        "- goal missed: helpdesk at batch 16: the fixed run of auto's choice / best (ngram-k3) 0.777 < 0.97" in lines
    )
    assert (
        "- goal missed: helpdesk at batch 16: auto's wall time +8.3% over the fixed run of its choice (at most 3%)"
        in (lines)
    )


def test_where_none_is_best_auto_must_reach_097_of_it() -> None:
    close = cell({"auto": [195], "none": [200], "ngram-k3": [190]})
    assert close.best == "none" and close.goals()["none"] is True  # 0.975
    short = cell({"auto": [192], "none": [200], "ngram-k3": [190]})
    assert short.goals() == {"choice": True, "cost": False, "none": False, "best": True}
    assert "- goal missed: helpdesk at batch 16: auto / none 0.960 < 0.97 (none is best)" in summary_lines([short])


def test_a_miss_smaller_than_one_fixed_jobs_own_spread_is_said_to_be_within_the_noise() -> None:
    # ngram-k3's two runs are 8 / 125 = 6.4 % apart; auto's wall time is 4.1 % over that set-up's median, within it.
    noisy = cell({"auto": [120, 120], "none": [100, 101], "ngram-k3": [121, 129]}, ["ngram-k3"] * 2)
    assert noisy.noise == (pytest.approx(8 / 125), "ngram-k3") and noisy.goals()["cost"] is False
    lines = summary_lines([noisy])
    assert (
        "- goal missed: helpdesk at batch 16: auto's wall time +4.1% over the fixed run of its choice (at most 3%); "
        "within the cell's noise (ngram-k3's runs 6.4% apart)"
    ) in lines
    assert lines[-1] == "- noise, helpdesk at batch 16: ngram-k3's fixed runs 6.4% apart"
    # A miss larger than the spread is said plainly; one run per set-up measures no spread.
    steady = cell({"auto": [110, 110], "none": [100, 101], "ngram-k3": [124, 126]}, ["ngram-k3"] * 2)
    assert any(line.endswith("(at most 3%)") for line in summary_lines([steady]))
    assert cell({"auto": [110], "none": [100], "ngram-k3": [125]}).noise is None


def test_a_choice_never_run_fixed_leaves_its_two_goals_unjudged() -> None:
    c = cell({"auto": [100, 100], "none": [90, 90], "ngram-k3": [110, 110]}, ["ngram-k3", "ngram-k5"])
    assert c.picks == ["ngram-k3", "ngram-k5"] and c.choice is None and c.cost is None
    assert c.goals()["choice"] is None and c.chose == "ngram-k3 (1x), ngram-k5 (1x)"


def test_the_table_row_and_the_cells_lines() -> None:
    c = cell({"auto": [125], "none": [100], "ngram-k3": [130], "suffix-k5": [92]}, ["ngram-k3"], batch=None)
    lines = summary_lines([c])
    assert lines[0].startswith("| workload | batch | none tok/s | best fixed | best tok/s | auto tok/s | auto chose |")
    assert lines[2] == (
        "| helpdesk | full | 100.0 | ngram-k3 | 130.0 | 125.0 | ngram-k3 | 1.000 | +4.0% | 1.250 | 0.962 | met | "
        "MISSED | n/a | met |"
    )
    detail = cell_lines(c)
    assert detail[0] == "### helpdesk, full batch"
    assert detail[2] == "short sweep (job tok/s): ngram-k3 120.0, suffix-k5 90.0"
    assert "| none | 100.0 | 100.0 | 125.0 | 10.0 | 8.0 | 5.0 |" in detail
    assert detail[-1] == "- auto chose ngram-k3 (measured: None): None"
