"""spec=auto from what the machine measures: the cost model fitted on timed steps, the choice of a k per batch
occupancy (k = 0 where speculation does not pay), the check that switches a shard back to spec=none, and whole shards
on the dummy backend with a step-time model the tests control (kills in each phase, shards sharing one decision)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import compose_job
from specbatch.auto import costs, deciding, schedule
from specbatch.auto.check import MIN_STEPS, SwitchCheck, check
from specbatch.auto.costs import StepCosts, fit_plain, with_speculative_steps
from specbatch.auto.decision import Predicted
from specbatch.auto.generation import AutoShardGeneration
from specbatch.auto.schedule import Option, caption, choose
from specbatch.backends.dummy.dummy import DummyEngine, StepCost
from specbatch.methods import SpecMethod
from specbatch.pipeline import run_job
from specbatch.run.folder import RunFolder
from specbatch.run.records.steps_file import StepTable, read_all_steps
from specbatch.run.summary import merge_summaries

# --- the cost model ---


def _table(setup: str, steps: list[tuple[int, int, int, int, float]]) -> StepTable:
    """(requests, tokens, prompt tokens, draft tokens, seconds) per step."""
    columns = {
        "at": [float(i) for i in range(len(steps))],
        "requests": [s[0] for s in steps],
        "tokens": [s[1] for s in steps],
        "prompt_tokens": [s[2] for s in steps],
        "draft_tokens": [s[3] for s in steps],
        "seconds": [s[4] for s in steps],
    }
    return StepTable(setup, None, 16, columns)


def _plain_steps(base: float, per_token: float, noise: float = 0.0) -> list[tuple[int, int, int, int, float]]:
    rng = random.Random(0)
    steps = []
    for _ in range(30):
        steps.append((16, 16, 0, 0, base + per_token * 16 + rng.gauss(0, noise)))
    for prompt in (200, 400, 800):  # prefilling steps: more tokens processed
        steps.append((16, 16, prompt, 0, base + per_token * (16 + prompt) + rng.gauss(0, noise)))
    return steps


def test_plain_costs_are_fitted_from_decoding_and_prefilling_steps() -> None:
    costs = fit_plain([_table("none", _plain_steps(0.010, 0.0005))])
    assert costs is not None
    assert costs.base == pytest.approx(0.010, rel=1e-6) and costs.per_token == pytest.approx(0.0005, rel=1e-6)
    assert "46 plain steps" not in costs.plain_source and "33 plain steps timed here" in costs.plain_source
    assert costs.speculative_source.startswith("prior: ") and "AMD EPYC" in costs.speculative_source
    assert not costs.speculative_measured


def test_too_few_steps_fit_nothing_and_one_batch_keeps_its_step_time() -> None:
    assert fit_plain([_table("none", _plain_steps(0.01, 0.001)[:5])]) is None
    flat = fit_plain([_table("none", [(8, 8, 0, 0, 0.02)] * 10)])
    assert flat is not None and flat.plain(8) == pytest.approx(0.02) and flat.per_token == 0.0


def test_steps_that_are_all_per_token_keep_a_cost_per_token_not_one_step_time() -> None:
    """Help-desk's full batch: prompt-heavy pilot steps whose straight line crosses below 0 at no tokens. One step
    time for every batch would make draft tokens free; the fit through 0 keeps them priced."""
    steps = [(178, 178, 0, 0, 0.20)] * 6 + [
        (178, 178 + p, p, 0, 0.0012 * (178 + p) - 0.05) for p in range(400, 4800, 80)
    ]
    costs = fit_plain([_table("none", steps)])
    assert costs is not None and costs.base == 0.0 and "all per token" in costs.plain_source
    assert 0.0011 < costs.per_token < 0.0013 and costs.per_draft > 0
    assert costs.speculative_pass(178, 3) > costs.plain(178)


def test_speculative_costs_are_measured_on_a_speculative_engines_steps() -> None:
    costs = fit_plain([_table("none", _plain_steps(0.010, 0.0005))])
    assert costs is not None
    spec = [(16, 40, 0, d, costs.plain(16) + 0.004 + 0.0003 * d) for d in (16, 32, 48) * 5]
    measured = with_speculative_steps(costs, [_table("ngram-k3", spec)])
    assert measured.speculative == pytest.approx(0.004, rel=1e-6)
    assert measured.per_draft == pytest.approx(0.0003, rel=1e-6)
    assert measured.speculative_measured and "15 speculative steps timed here" in measured.speculative_source


def test_a_speculative_engines_steps_alone_size_the_whole_model() -> None:
    """A pilot on a speculative set-up times no spec=none step: its steps size the model, split by the priors'
    ratios; spec=none's step and k = 0's overhead come out as the steps were made."""
    base, per_token = 0.010, 0.0005
    truth = StepCosts(
        base, per_token, costs.SPECULATIVE_OVER_BASE * base, costs.PER_DRAFT_OVER_PER_TOKEN * per_token, "", "", 0.15
    )
    steps = [(16, 16, 300, 48, truth.speculative_pass(16, 3) + per_token * 300)]  # prefilled and drafted
    for requests in (16, 12, 8, 4):
        # Draft tokens per request vary (n-gram drafts fewer where nothing matches); some steps draft nothing.
        steps += [(requests, requests, 0, requests * d, truth.speculative_pass(requests, d)) for d in (1, 2, 3)]
        steps += [(requests, requests, 0, 0, truth.drafting_nothing(requests))] * 2
    fitted = costs.fit_speculative([_table("ngram-k3", steps)])
    assert fitted is not None
    assert fitted.base == pytest.approx(base, rel=1e-6) and fitted.per_token == pytest.approx(per_token, rel=1e-6)
    assert fitted.speculative_pass(10, 2) == pytest.approx(truth.speculative_pass(10, 2), rel=1e-6)
    assert fitted.k0_overhead == pytest.approx(0.15, rel=1e-6) and "drafted nothing" in fitted.k0_source
    assert "split by the prior's ratios (spec=none's own steps not timed)" in fitted.plain_source
    assert fitted.speculative_measured
    assert costs.fit_speculative([_table("ngram-k3", steps[:8])]) is None  # 6 steps drafted: too few


def test_the_prompts_share_of_spec_nones_time_is_reckoned_from_any_engine_s_steps() -> None:
    """300 prompt tokens prefilled in one of every 5 steps, beside 16 requests decoding: at 0.0005 s a token the
    prompts take 0.15 s of every 0.15 + 5 x 0.018 s. An engine decoding 1.5x spec=none's pace took 1/1.5 of none's
    decoding time, which the share is reckoned against; a fit that prices the prompts above the steps' time leaves
    them all."""
    model = StepCosts(0.010, 0.0005, 0.0, 0.0, "", "")
    steps = []
    for _ in range(10):
        steps.append((16, 16, 300, 0, model.plain(16) + 0.0005 * 300))
        steps += [(16, 16, 0, 0, model.plain(16))] * 4
    table = _table("none", steps)
    prompt, decoding = 10 * 0.15, 50 * model.plain(16)
    assert costs.prompt_share(model, [table], 1.0) == pytest.approx(prompt / (prompt + decoding), rel=1e-9)
    # The same seconds from an engine decoding 1.5x faster than spec=none: none's decoding is 1.5x as long.
    assert costs.prompt_share(model, [table], 1.5) == pytest.approx(prompt / (prompt + 1.5 * decoding), rel=1e-9)
    assert costs.prompt_share(StepCosts(0.010, 0.05, 0.0, 0.0, "", ""), [table], 1.0) == 1.0
    assert costs.prompt_share(StepCosts(0.010, 0.0, 0.0, 0.0, "", ""), [table], 1.0) is None  # no part per token
    assert costs.prompt_share(model, [], 1.0) is None


# --- the choice per batch occupancy ---

# A CPU-like machine: a step's cost grows with the tokens it processes, so verifying drafts costs most at full batch.
# Its speculative engine costs nothing more than spec=none's where it drafts nothing (k0_overhead 0: see below).
CPU = StepCosts(0.010, 0.001, 0.002, 0.001, "test", "test", k0_overhead=0.0)
# Completion lengths of a pilot: most short, a few running to max_tokens (the tail a full batch drains into).
LENGTHS = [20.0] * 10 + [60.0] * 6 + [128.0] * 4
NGRAM = [
    Option("ngram-k1", SpecMethod.ngram, 1, 1.5, 1.0),
    Option("ngram-k3", SpecMethod.ngram, 3, 2.2, 3.0),
]


def test_speculation_is_off_at_full_batch_and_a_larger_k_runs_in_the_tail() -> None:
    choice = choose(NGRAM, CPU, 256, 10_000, LENGTHS, switch_seconds=0.0)
    assert choice.method is SpecMethod.ngram
    schedule = choice.schedule
    assert schedule[0][0] == 1 and schedule[-1][1] == 256 and schedule[-1][2] == 0
    assert schedule[0][2] == 3 and all(a[1] + 1 == b[0] for a, b in zip(schedule, schedule[1:], strict=False))
    assert choice.label.startswith("ngram-sched-1to") and choice.saved_seconds > 0
    by_bucket = {row["requests"]: row for row in choice.buckets}
    assert by_bucket["1"]["k"] == 3 and by_bucket["1"]["predicted_speedup"] == pytest.approx(2.2 * 0.011 / 0.016)
    assert by_bucket["256"]["k"] == 0 and by_bucket["256"]["predicted_speedup"] == 1.0


def test_k0s_overhead_enters_the_costs() -> None:
    """vLLM's n-gram engine at k 0 still runs its proposer (measured 20 % slower than spec=none on chat at batch
    16): a schedule whose bulk runs at k 0 pays that at full batch, which the tail's drafts do not make up here, so
    spec=none stays; reckoned at spec=none's cost (k0_overhead 0), the same schedule looked like a saving."""
    assert choose(NGRAM, CPU, 256, 10_000, LENGTHS, switch_seconds=0.0).label != "none"
    prior = fit_plain([_table("none", _plain_steps(0.010, 0.001))])
    assert prior is not None and prior.k0_overhead == 0.2 and prior.k0_source.startswith("prior: ")
    costly = StepCosts(0.010, 0.001, 0.002, 0.001, "test", "test", k0_overhead=prior.k0_overhead)
    kept = choose(NGRAM, costly, 256, 10_000, LENGTHS, switch_seconds=0.0)
    assert kept.label == "none" and "spec=none stays" in kept.why
    by_bucket = {row["requests"]: row for row in kept.buckets}
    assert by_bucket["256"]["k"] == 0 and by_bucket["256"]["predicted_speedup"] == pytest.approx(1 / 1.2)


def test_k0s_overhead_is_measured_on_a_speculative_engines_steps_that_drafted_nothing() -> None:
    costs = fit_plain([_table("none", _plain_steps(0.010, 0.0005))])
    assert costs is not None
    idle = [(16, 16, 0, 0, costs.plain(16) * 1.17)] * 10
    drafting = [(16, 40, 0, d, costs.plain(16) + 0.004 + 0.0003 * d) for d in (16, 32, 48) * 5]
    measured = with_speculative_steps(costs, [_table("ngram-sched-1to4k3-5to16k0", idle + drafting)])
    assert measured.k0_overhead == pytest.approx(0.17) and "10 steps of a speculative engine" in measured.k0_source
    assert measured.speculative == pytest.approx(0.004, rel=1e-6)
    assert measured.to_dict()["k0_overhead"] == pytest.approx(0.17)
    assert with_speculative_steps(costs, [_table("ngram-k3", idle[:3])]).k0_overhead == 0.2  # too few: the prior


def test_one_k_everywhere_is_a_fixed_set_up_and_a_costly_switch_keeps_none() -> None:
    gpu_like = StepCosts(0.010, 0.00001, 0.0005, 0.00001, "test", "test")
    choice = choose(NGRAM, gpu_like, 64, 10_000, LENGTHS, switch_seconds=1.0)
    assert choice.label == "ngram-k3" and choice.fixed_k == 3 and choice.predicted_speedup > 1.5
    kept = choose(NGRAM, CPU, 256, 300, LENGTHS, switch_seconds=1_000.0)
    assert kept.label == "none" and "less than the 1000.0 s the switch costs" in kept.why


def test_a_speculative_pilot_keeps_its_k_where_nothing_saves_time_and_none_needs_a_start_up() -> None:
    """n-gram k 1 is predicted 0.99x spec=none at every batch size, and k 0's overhead makes off everywhere slower
    still. After a spec=none pilot, none stays. After a pilot on n-gram k 1, whose engine runs it in place, spec=none
    would cost a start-up of 30 s against the second k 1 loses: k 1 is kept. (Help-desk at batch 16 switched to
    spec=none so, and ran 0.89x the best fixed set-up.)"""
    weak = [Option("ngram-k1", SpecMethod.ngram, 1, 1.05, 1.0)]
    flat = StepCosts(0.010, 0.00001, 0.0005, 0.00001, "test", "test", k0_overhead=0.2)
    assert choose(weak, flat, 16, 2_000, LENGTHS, switch_seconds=30.0).label == "none"
    on_ngram = lambda method, k: method is SpecMethod.ngram  # noqa: E731
    kept = choose(weak, flat, 16, 2_000, LENGTHS, switch_seconds=30.0, stays=on_ngram)
    assert kept.label == "ngram-k1" and kept.fixed_k == 1 and -30.0 < kept.saved_seconds < 0
    # A start-up cheaper than what k 1 loses: spec=none runs the rest.
    cheap = choose(weak, flat, 16, 2_000, LENGTHS, switch_seconds=0.01, stays=on_ngram)
    assert cheap.label == "none" and "spec=none runs the rest" in cheap.why


def test_the_set_up_running_is_kept_unless_a_choice_saves_a_margin_more() -> None:
    """n-gram k 2 is predicted 0.99x spec=none at batch 16 and faster below, k 0 costs nothing more: k 2 below 16
    and off at 16 is predicted to save 0.5 s more than k 2 everywhere, under KEEP_MARGIN (1 %) of the rest's ~70 s.
    The set-up running is kept (help-desk at batch 16 revised to such a schedule on "0.0 s saved"); when k 2
    everywhere loses more, the schedule takes over. After a spec=none pilot a switch in place costing nothing is
    not made for 0.2 s either."""
    costs = StepCosts(0.010, 0.0001, 0.0001, 0.0002, "test", "test", k0_overhead=0.0)
    close = [Option("ngram-k2", SpecMethod.ngram, 2, 1.55, 2.0)]
    on_ngram = lambda method, k: method is SpecMethod.ngram  # noqa: E731
    assert choose(close, costs, 16, 2_000, LENGTHS, switch_seconds=30.0, stays=on_ngram).label.startswith(
        "ngram-sched"
    )
    kept = choose(close, costs, 16, 2_000, LENGTHS, switch_seconds=30.0, stays=on_ngram, running="ngram-k2")
    assert kept.label == "ngram-k2" and "under 1% of the rest: ngram-k2 is kept" in kept.why
    behind = [Option("ngram-k2", SpecMethod.ngram, 2, 1.45, 2.0)]  # k 2 at 16: 0.93x
    moved = choose(behind, costs, 16, 2_000, LENGTHS, switch_seconds=30.0, stays=on_ngram, running="ngram-k2")
    assert moved.label.startswith("ngram-sched") and moved.schedule[-1][2] == 0
    assert choose(close, costs, 16, 2_000, LENGTHS, switch_seconds=0.0).label.startswith("ngram-sched")
    stays = choose(close, costs, 16, 2_000, LENGTHS, switch_seconds=0.0, running="none")
    assert stays.label == "none" and "under 1% of the rest" in stays.why


def test_a_method_that_cannot_follow_a_schedule_runs_one_k_or_not_at_all() -> None:
    suffix = [Option("suffix-k5", SpecMethod.suffix, 5, 2.6, 2.0)]
    choice = choose(suffix, CPU, 256, 10_000, LENGTHS, switch_seconds=0.0)
    assert choice.label in ("none", "suffix-k5") and len(choice.schedule) == 1


def test_the_caption_says_where_speculation_runs() -> None:
    assert (
        caption("ngram", [[1, 7, 3], [8, 32, 1], [33, 256, 0]], 3) == "ngram, k 3 below batch 8, 1 up to 32, off above"
    )
    assert caption("ngram", None, 3) == "ngram k=3" and caption(None, None, None) == "none"


# --- the check after the hand-over ---


def _rates_table(setup: str, rate: float, count: int, drafts: int, spread: float = 0.02) -> StepTable:
    rng = random.Random(setup)
    steps = []
    for _ in range(count):
        seconds = 0.01 * (1 + rng.uniform(-spread, spread))
        steps.append((8, round(rate * 8 * seconds), 0, drafts, seconds))
    return _table(setup, steps)


def test_the_check_finds_a_slower_speculation_and_not_noise() -> None:
    reference = [_rates_table("none", 100, 40, 0)]
    assert check(_rates_table("ngram-k3", 80, MIN_STEPS - 1, 24), reference) is None, "too few steps: no answer"
    slower = check(_rates_table("ngram-k3", 80, MIN_STEPS, 24), reference)
    assert slower is not None and slower.slower and 0.7 < slower.figures["ratio"] < 0.85
    same = check(_rates_table("ngram-k3", 99, 60, 24), reference)
    assert same is not None and not same.slower and "not measurably slower" in same.why


def test_the_check_weighs_steps_by_their_time_not_one_each() -> None:
    """Speculation's steps alternate three cheap ones that drafted nothing useful (20 tokens per request per second)
    with one long verification that accepted much (110): a mean of per-step rates says 0.85x spec=none's 50 over all
    the steps and 2.2x over the drafting ones alone; what the requests got is 1.43x, and the check must say that
    (measured on chat rows: 0.92x by the mean over drafting steps, 1.06x by the sums, with fixed suffix 1.02x
    spec=none over the whole job)."""
    reference = [_table("none", [(16, 16, 0, 0, 0.02)] * 12 + [(16, 16, 0, 0, 0.0201)] * 12)]
    cycle = [(16, 16, 0, 0, 0.05)] * 3 + [(16, 352, 0, 96, 0.2)]
    verdict = check(_table("ngram-k3", cycle * 120), reference)
    assert verdict is not None and not verdict.slower
    assert verdict.figures["ratio"] == pytest.approx((3 * 16 + 352) / (16 * 0.35) / (16 / (16 * 0.02)), rel=0.01)


def test_the_check_fed_step_by_step_agrees_with_one_read_of_the_whole_stream() -> None:
    """The winner's stream is checked every few steps with only its new steps: same figures as reading it whole."""
    reference = [_rates_table("none", 100, 40, 0)]
    whole = _rates_table("ngram-k3", 90, 70, 24)
    live = type(whole)(whole.setup, None, 16)
    checking, verdicts = SwitchCheck(reference), []
    for step in whole.steps():
        for name, value in zip(live.columns, step, strict=True):
            live.columns[name].append(value)
        if len(live) % 16 == 0:
            verdicts.append(checking.update(live))
    last = checking.update(live)
    expected = check(whole, reference)
    assert verdicts[0] is None and last is not None and expected is not None
    assert last.slower == expected.slower and last.figures["requests"] == expected.figures["requests"]
    numbers = {k: v for k, v in expected.figures.items() if k != "requests"}
    assert {k: last.figures[k] for k in numbers} == pytest.approx(numbers, rel=1e-9)


# --- whole shards on the dummy with a step-time model ---

# 2 ms a step (plus what the dummy itself takes), 0.5 ms a token processed, 0.5 ms more for a speculative step:
# with 1.9 tokens a pass at k 2, speculation pays with one request in the step and not with eight (the prior's
# shape, the dummy's own costs).
STEP_COST = StepCost(0.002, 0.0005, 0.0005)
PREDICTED = [Predicted("ngram-k2", 1.9, 2.0, 1.9, 1.0), Predicted("ngram-k1", 1.4, 1.0, 1.4, 1.0)]


def occupancy_job(root: Path, *extra: str):
    """Short prompts (a prefilled prompt token costs the dummy as much as a decoded one), 96 rows."""
    data = root / "questions.jsonl"
    if not data.exists():
        root.mkdir(parents=True, exist_ok=True)
        data.write_text("".join(json.dumps({"id": f"q{i}", "q": f"Question {i}?"}) + "\n" for i in range(96)))
    return compose_job(
        [
            f"output_root={root}",
            "spec=auto",
            "engine.backend=dummy",
            "engine.max_num_seqs=8",
            "tracking=off",
            "dataset=local",
            f"dataset.path={data}",
            "dataset.template='{q}'",
            "dataset.id_column=id",
            "dataset.chat=false",
            "max_samples=48",
            "sampling.max_tokens=24",
            "spec.auto.pilot_rows=8",
            "spec.auto.budget=0",
            "spec.auto.candidates=[none,ngram-k1,ngram-k2]",
            "chunk_size=8",
            # Piloted on spec=none, whose steps these tests time; test_auto_pilot.py pilots on the likeliest.
            "spec.auto.pilot=none",
            *extra,
        ]
    )


@pytest.fixture
def timed(monkeypatch):
    """The dummy takes time per step; replay predicts PREDICTED (its made-up tokens never repeat); starting an
    engine costs nothing, so any saving pays for the switch."""
    monkeypatch.setattr(DummyEngine, "start_step_cost", STEP_COST)
    monkeypatch.setattr(deciding, "predict", lambda *args: list(PREDICTED))
    # The dummy's speculative step costs more only when it verifies drafts: at k 0 it is spec=none's.
    monkeypatch.setattr(costs, "K0_OVERHEAD", 0.0)
    # The dummy's schedules save a small share of its short rests: these tests follow a choice through the run.
    monkeypatch.setattr(schedule, "KEEP_MARGIN", 0.0)


def _rows(folder: RunFolder) -> list[dict]:
    return [row for part in folder.parts() for row in pq.read_table(part).to_pylist()]


def _every_row_once(folder: RunFolder, rows: int) -> None:
    out = _rows(folder)
    assert len(out) == rows and len({r["row_id"] for r in out}) == rows


def test_the_schedule_chosen_runs_through_the_engine_and_is_recorded(tmp_path: Path, timed) -> None:
    result = run_job(occupancy_job(tmp_path))
    folder = result.folder
    decision = json.loads(folder.decision_path.read_text())
    schedule = decision["k_schedule"]
    assert schedule and schedule[0][:2] == [1, schedule[0][1]] and schedule[0][2] == 2, decision["why"]
    assert schedule[-1] == [schedule[-1][0], 8, 0] and len(schedule) == 2
    first_off = schedule[-1][0]
    assert decision["winner"] == f"ngram-sched-1to{first_off - 1}k2-{first_off}to8k0"
    assert decision["winner_caption"] == f"ngram, k 2 below batch {first_off}, off above"
    assert f"spec.k_schedule=[[1,{first_off - 1},2],[{first_off},8,0]]" in decision["overrides"]
    by_bucket = {row["requests"]: row for row in decision["schedule"]}
    assert by_bucket["1"]["k"] == 2 and by_bucket["1"]["predicted_speedup"] > 1.05
    assert by_bucket["8"]["k"] == 0 and by_bucket["8"]["predicted_speedup"] == 1.0
    assert decision["costs"]["speculative_source"].startswith("prior")
    assert decision["costs"]["per_token_seconds"] == pytest.approx(0.0005, rel=0.3), "fitted on the pilot's steps"
    # The prompts' share the plan's speedups were weighed with, kept beside the costs the schedule used.
    plan = json.loads(folder.auto_plan_path.read_text())
    assert 0 < decision["costs"]["prompt_share"] == plan["costs"]["prompt_share"] < 1
    _every_row_once(folder, 48)
    # The winner's engine followed the schedule: no drafts with 8 requests in the step, drafts below.
    winner = [t for t in read_all_steps(folder.steps_dir) if t.setup == decision["winner"]]
    assert winner and winner[0].k_schedule == schedule
    pairs = [(r, d) for t in winner for r, d in zip(t.columns["requests"], t.columns["draft_tokens"], strict=True)]
    assert all(d == 0 for r, d in pairs if r >= first_off) and any(d > 0 for r, d in pairs if r < first_off)
    assert not folder.auto_switch_path.exists()
    # The shard summary keeps each set-up's steps per bucket as sums (shards add up exactly).
    buckets = result.summary.step_buckets
    tables = read_all_steps(folder.steps_dir)
    assert set(buckets) == {"none", decision["winner"]}
    for setup, figures in buckets.items():
        own = [s for t in tables if t.setup == setup for s in t.steps()]
        assert sum(b["steps"] for b in figures.values()) == len(own)
        assert sum(b["tokens"] for b in figures.values()) == sum(s.tokens for s in own)
        assert all(b["tok_s"] == pytest.approx(b["tokens"] / b["seconds"]) for b in figures.values())


@pytest.mark.parametrize("in_place", [True, False])
def test_a_winner_slower_than_predicted_is_switched_back_to_none(
    in_place: bool, tmp_path: Path, timed, monkeypatch
) -> None:
    """Replay says every pass makes 3 tokens, so k 2 is chosen at every batch size; the engine's speculative steps
    cost 20 ms more than a plain one, which the check sees: the rest of the shard runs with spec=none, in the same
    engine with k 0 when that costs less than a start-up over the rest (the dummy starts in no time, so only when
    k 0 costs nothing more than spec=none), else in an engine of its own."""
    # The plan's costs carry k = 0's overhead (fitted on spec=none's steps: the prior's).
    monkeypatch.setattr(costs, "K0_OVERHEAD", 0.0 if in_place else 0.2)
    monkeypatch.setattr(deciding, "predict", lambda *args: [Predicted("ngram-k2", 3.0, 2.0, 3.0, 2.0)])
    job = occupancy_job(tmp_path, "max_samples=96")
    real_start = DummyEngine.start

    started = []

    def start(cls, job):
        engine = real_start(job)
        # A roomy engine (specbatch.auto.engines) is started with a schedule at the set-up's k.
        spec = job.spec
        started.append(f"{spec.method.value}-k{spec.k_schedule[0][2]}" if spec.k_schedule else spec.label)
        if job.spec.k:
            engine.step_cost = StepCost(0.002, 0.0005, 0.020)
        return engine

    monkeypatch.setattr(DummyEngine, "start", classmethod(start))
    result = run_job(job)
    folder = result.folder
    decision = json.loads(folder.decision_path.read_text())
    assert decision["winner"] == "ngram-k2"
    switch = json.loads(folder.auto_switch_path.read_text())
    assert switch["winner"] == "ngram-k2" and "slower" in switch["why"] and switch["figures"]["ratio"] < 0.5
    setups = [folder.read_part_stats(n)["setup"] for n in folder.part_numbers()]
    assert setups[0] == "none" and "ngram-k2" in setups and setups[-1] == "none"
    _every_row_once(folder, 96)
    # In place: speculation turned off in the winner's running engine (Engine.set_k_schedule), no third start-up.
    assert started == (["none", "ngram-k2"] if in_place else ["none", "ngram-k2", "none"])


@pytest.mark.parametrize("phase", ["pilot", "winner", "after the switch"])
def test_a_kill_in_each_phase_resumes_with_every_row_once(phase: str, tmp_path: Path, timed, monkeypatch) -> None:
    if phase == "after the switch":
        monkeypatch.setattr(deciding, "predict", lambda *args: [Predicted("ngram-k2", 3.0, 2.0, 3.0, 2.0)])
        monkeypatch.setattr(DummyEngine, "start_step_cost", StepCost(0.002, 0.0005, 0.020))
    job = occupancy_job(tmp_path, "max_samples=96")
    streams = {"pilot": 1, "winner": 2, "after the switch": 3}[phase]
    real_stream = AutoShardGeneration._stream
    calls = []

    class Killed(Exception):
        pass

    def stream(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == streams:
            # Killed while the stream runs: its first chunk written, what was in flight lost.
            self.engine.die_after = self.engine.completed + 9
        real_stream(self, *args, **kwargs)

    monkeypatch.setattr(AutoShardGeneration, "_stream", stream)
    with pytest.raises(KeyboardInterrupt):
        run_job(job)
    folder = RunFolder.for_job(job)
    written = {n: folder.read_part_stats(n)["launch"] for n in folder.part_numbers()}
    assert written, "something was written before the kill"
    monkeypatch.setattr(AutoShardGeneration, "_stream", real_stream)
    result = run_job(job)
    _every_row_once(result.folder, 96)
    assert {n: folder.read_part_stats(n)["launch"] for n in written} == written, "finished parts are kept"
    if phase == "after the switch":
        assert folder.auto_switch_path.exists()
        assert [folder.read_part_stats(n)["setup"] for n in folder.part_numbers()][-1] == "none"


def test_shards_share_the_first_decision_and_its_schedule(tmp_path: Path, timed) -> None:
    base = ["shard.count=2", "max_samples=96"]
    first = run_job(occupancy_job(tmp_path, *base, "shard.index=0"))
    decision = json.loads(first.folder.decision_path.read_text())
    assert decision["k_schedule"]
    second = run_job(occupancy_job(tmp_path, *base, "shard.index=1"))
    setups = {second.folder.read_part_stats(n)["setup"] for n in second.folder.part_numbers()}
    assert setups == {decision["winner"]}, "a shard started after the decision runs every row with its schedule"
    assert json.loads(second.folder.decision_path.read_text()) == decision
    merged = merge_summaries([first.summary, second.summary]).step_buckets
    for setup, figures in merged.items():
        for label, sums in figures.items():
            parts = [s.step_buckets.get(setup, {}).get(label) for s in (first.summary, second.summary)]
            assert sums["steps"] == sum(p["steps"] for p in parts if p)
