"""jobs/bench.py --auto's goals per cell and its table, on made-up measurements (no engine)."""

from __future__ import annotations

import statistics
from dataclasses import replace

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


def test_a_set_up_run_only_in_the_round_that_chose_it_is_not_the_best_on_its_one_run() -> None:
    # Auto chose suffix k 5 in one round of two: its one fixed run (135) tops the medians of the set-ups run in both
    # rounds, by no more than one run's spread (ngram-k3's runs are 120 and 140).
    c = cell(
        {"auto": [118, 126], "none": [100, 104], "ngram-k3": [120, 140], "suffix-k5": [135]}, ["suffix-k5", "none"]
    )
    assert c.best == "ngram-k3"
    assert c.choice == pytest.approx(102 / 130) and c.vs_best == pytest.approx(122 / 130)
    # Chosen in both rounds, its two runs stand beside the others' two.
    both = cell({"auto": [118, 126], "none": [100, 104], "ngram-k3": [120, 140], "suffix-k5": [135, 137]})
    assert both.best == "suffix-k5"


def test_a_choice_never_run_fixed_leaves_its_two_goals_unjudged() -> None:
    c = cell({"auto": [100, 100], "none": [90, 90], "ngram-k3": [110, 110]}, ["ngram-k3", "ngram-k5"])
    assert c.picks == ["ngram-k3", "ngram-k5"] and c.choice is None and c.cost is None
    assert c.goals()["choice"] is None and c.chose == "ngram-k3 (1x), ngram-k5 (1x)"


def test_the_table_row_and_the_cells_lines() -> None:
    c = cell({"auto": [125], "none": [100], "ngram-k3": [130], "suffix-k5": [92]}, ["ngram-k3"], batch=None)
    lines = summary_lines([c])
    assert lines[0].startswith("| workload | batch | none tok/s | best fixed | best tok/s | auto tok/s | auto chose |")
    assert lines[2] == (
        "| helpdesk | full | 100.0 | ngram-k3 | 130.0 | 125.0 | ngram-k3 | 1.000 | +4.0% | - | 1.250 | 0.962 | met | "
        "MISSED | n/a | met |"
    )
    detail = cell_lines(c)
    assert detail[0] == "### helpdesk, full batch"
    assert detail[2] == "short sweep (job tok/s): ngram-k3 120.0, suffix-k5 90.0"
    assert "| none | 100.0 | 100.0 | 125.0 | 10.0 | 8.0 | 5.0 | - |" in detail
    assert detail[-1] == "- auto chose ngram-k3 (measured: None): None"


def stepped(m: Measured, setup: str, buckets: dict[str, tuple[int, float]]) -> Measured:
    """``m`` with engine steps: bucket -> (steps, seconds) of ``setup``."""
    steps = {setup: {b: {"steps": float(n), "seconds": sec} for b, (n, sec) in buckets.items()}}
    return Measured(m.setup, m.figures, m.startup_seconds, m.decision, steps)


def test_the_cost_of_choosing_is_also_given_at_the_choices_pace() -> None:
    """The same steps run slower when the machine does: auto's steps priced at the fixed run's seconds per step take
    the machine's drift out of goal 2 and leave what choosing added."""
    # Fixed k3, 10 s wall: 20 steps at 16-31 in 6 s, 10 at 1-15 in 1 s.
    k3 = stepped(measured("ngram-k3", 100), "ngram-k3", {"16-31": (20, 6.0), "1-15": (10, 1.0)})
    # Auto ran the same 30 steps of k3, each 20 % slower (8.4 s), and 1.6 s of pilot slices of suffix, 12.5 s wall.
    slow = Measured("auto", Throughput(32, 1000, 10.0, 12.5), 5.0, {"winner": "ngram-k3"})
    slow = stepped(slow, "ngram-k3", {"16-31": (20, 7.2), "1-15": (10, 1.2)})
    assert slow.steps is not None
    slow.steps["suffix-k5"] = {"16-31": {"steps": 4.0, "seconds": 1.6}}
    # The machine ran at 7 / 8.4 of the fixed run's pace: 12.5 - (8.4 + 1.6) x (1 - 7 / 8.4) s.
    paced = 12.5 - 10.0 * (1 - 7 / 8.4)
    assert slow.paced_wall(k3, "ngram-k3") == pytest.approx(paced)
    c = Cell("helpdesk", 16, {"auto": [slow], "none": [measured("none", 90)], "ngram-k3": [k3]})
    assert c.cost == pytest.approx(0.25) and c.paced_cost == pytest.approx(paced / 10 - 1)
    assert c.goals()["cost"] is False, "the verdict stays on the wall times"
    lines = summary_lines([c])
    assert f"| +25.0% | {paced / 10 - 1:+.1%} |" in lines[2]
    assert any(f"(at most 3%); {paced / 10 - 1:+.1%} at its choice's pace" in line for line in lines)
    # The work each run did, in engine steps (the machine's speed does not move it), beside the cell's walls.
    assert slow.engine_steps == 34 and k3.engine_steps == 30
    assert "| ngram-k3 | 100.0 | 100.0 | 125.0 | 10.0 | 8.0 | 5.0 | 30 |" in cell_lines(c)
    # No steps of the choice in a bucket both ran: nothing to price.
    assert slow.paced_wall(measured("ngram-k3", 100), "ngram-k3") is None
    assert Cell("helpdesk", 16, {"auto": [slow], "ngram-k3": [measured("ngram-k3", 100)]}).paced_cost is None
    # A choice run only in the rounds that chose it pairs with auto's runs by turn, not by round.
    other = stepped(measured("auto", 80, {"winner": "suffix-k5"}), "suffix-k5", {"16-31": (4, 1.6)})
    suffix = stepped(measured("suffix-k5", 90), "suffix-k5", {"16-31": (4, 0.8)})
    mixed = Cell("helpdesk", 16, {"auto": [slow, other], "ngram-k3": [k3, k3], "suffix-k5": [suffix]})
    assert mixed.paced_cost == pytest.approx(statistics.median([paced / 10 - 1, (12.5 - 0.8) / (1000 / 90) - 1]))


def test_jobs_launched_in_the_machines_first_hour_are_named_under_the_table() -> None:
    c = cell({"auto": [45.2, 48.6], "none": [48.9, 50.3], "ngram-k2": [51.3, 49.1]}, ["ngram-k2", "ngram-k2"])
    results = dict(c.results)
    results["auto"] = [
        replace(results["auto"][0], booted_minutes=28.0),
        replace(results["auto"][1], booted_minutes=79),
    ]
    results["none"] = [replace(m, booted_minutes=59.5) for m in results["none"]]
    early = Cell(c.workload, c.batch, results, c.sweep)
    assert early.early == ["auto run 1 (28 min)", "none run 1 (59 min)", "none run 2 (59 min)"]
    assert summary_lines([early])[-1] == (
        "- launched within 60 min of the machine's boot, when these machines run slower, helpdesk at batch 16: "
        "auto run 1 (28 min), none run 1 (59 min), none run 2 (59 min)"
    )
    # Unknown (an older measured.json, or no /proc/uptime): nothing said.
    assert c.early == [] and not any("machine's boot" in line for line in summary_lines([c]))
