"""The set-up a spec=auto shard pilots on, from earlier runs of the same kind of job (whole runs on the dummy backend:
no model)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import compose_job
from specbatch.auto import likeliest as likeliest_module
from specbatch.auto.candidates import candidates
from specbatch.auto.decision import slower_before
from specbatch.auto.likeliest import likeliest
from specbatch.pipeline import run_job
from specbatch.run.folder import RunFolder
from specbatch.run.status_merge import finished_summary

CANDIDATES = "spec.auto.candidates=[none,ngram-k2,ngram-k5,suffix-k5]"


def _job(root: Path, *extra: str):
    return compose_job([f"output_root={root}", "engine.backend=dummy", "tracking=off", "max_samples=12", *extra])


def _fixed_rates(job):
    """Each candidate's earlier fixed runs (median tok/s) among the runs of the one size the pilot is chosen from."""
    labels = {c.label for c in candidates(job)}
    return likeliest_module._fixed_rates(likeliest_module.matching_runs(job), labels, job)


def _auto(root: Path, *extra: str):
    return _job(root, "spec=auto", CANDIDATES, "spec.auto.pilot_rows=4", "spec.auto.measure_top=0", *extra)


def test_without_earlier_runs_the_pilot_is_the_first_speculative_candidate(tmp_path: Path) -> None:
    job = _auto(tmp_path)
    chosen = likeliest(job, candidates(job))
    assert chosen.label == "ngram-k2" and chosen.source.startswith("prior: no earlier run")
    only_none = _auto(tmp_path, "spec.auto.candidates=[none]")
    assert likeliest(only_none, candidates(only_none)).label == "none"


def test_the_fastest_matching_fixed_run_is_the_likeliest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made = {
        "ngram-k5": ["spec=ngram", "spec.num_speculative_tokens=5"],
        "none": ["spec=none"],
        # Faster still, but of another kind: another batch, or sampled.
        "suffix-k5": ["spec=suffix", "engine.max_num_seqs=4"],
        "ngram-k2": ["spec=ngram", "spec.num_speculative_tokens=2", "sampling=sampled"],
    }
    runs = {label: run_job(_job(tmp_path, *overrides)).folder.root for label, overrides in made.items()}
    assert finished_summary(runs["none"]).output_tokens_per_second > 0  # what _rate reads, from a real run
    rates = {runs["ngram-k5"]: 120.0, runs["none"]: 100.0, runs["suffix-k5"]: 500.0, runs["ngram-k2"]: 400.0}
    monkeypatch.setattr(likeliest_module, "_rate", lambda root: rates[root])
    job = _auto(tmp_path)
    chosen = likeliest(job, candidates(job))
    assert chosen.label == "ngram-k5" and str(runs["ngram-k5"]) in chosen.source and "120.0 tok/s" in chosen.source
    rates[runs["none"]] = 130.0
    assert likeliest(job, candidates(job)).label == "none"
    # A set-up that is not among this job's candidates is not piloted on.
    narrow = _auto(tmp_path, "spec.auto.candidates=[none,suffix-k5]")
    assert likeliest(narrow, candidates(narrow)).label == "none"


def test_an_earlier_auto_runs_decision_comes_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_job(_job(tmp_path, "spec=ngram", "spec.num_speculative_tokens=5"))
    earlier = run_job(_auto(tmp_path, "run_name=earlier")).folder
    winner = RunFolder(earlier.root).read_decision()["winner"]
    monkeypatch.setattr(likeliest_module, "_rate", lambda root: 1000.0)  # every fixed run faster: still the decision
    job = _auto(tmp_path)
    chosen = likeliest(job, candidates(job))
    assert chosen.label == winner and str(earlier.root) in chosen.source
    # A run's own folder is never its own evidence: resumed, the earlier run finds only the fixed one.
    again = likeliest(_auto(tmp_path, "run_name=earlier"), candidates(job))
    assert again.label == "ngram-k5" and again.source.startswith("the fastest earlier fixed run")


def test_set_ups_are_compared_on_runs_of_one_size_the_nearest_to_the_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's tok/s depends on its size as much as on its set-up: a 6-row sweep's winner is not outranked by
    spec=none's one 12-row run, and once 12-row runs compare two set-ups, a 12-row job reads those."""

    made: list[Path] = []

    def fixed(rows: int, *overrides: str) -> Path:
        made.append(
            run_job(_job(tmp_path, *overrides, f"max_samples={rows}", f"run_name=fixed{len(made)}")).folder.root
        )
        return made[-1]

    sweep = {
        "none": fixed(6, "spec=none"),
        "ngram-k2": fixed(6, "spec=ngram", "spec.num_speculative_tokens=2"),
        "ngram-k5": fixed(6, "spec=ngram", "spec.num_speculative_tokens=5"),
    }
    long_none = fixed(12, "spec=none")
    rates = {sweep["none"]: 50.0, sweep["ngram-k2"]: 60.0, sweep["ngram-k5"]: 70.0, long_none: 130.0}
    monkeypatch.setattr(likeliest_module, "_rate", lambda root: rates[root])
    job = _auto(tmp_path)  # 12 rows
    chosen = likeliest(job, candidates(job))
    assert chosen.label == "ngram-k5" and str(sweep["ngram-k5"]) in chosen.source
    earlier = _fixed_rates(job)
    assert {label: rate for label, (rate, _) in earlier.items()} == {"none": 50.0, "ngram-k2": 60.0, "ngram-k5": 70.0}
    # The sweep says every other set-up is slower than n-gram k5: nothing left to measure beside it.
    assert likeliest_module.nothing_to_measure(job, candidates(job), "ngram-k5") is None  # suffix-k5 never ran
    # 12-row runs now compare two set-ups: the 12-row job reads them, a 6-row one still reads the sweep.
    rates[fixed(12, "spec=ngram", "spec.num_speculative_tokens=5")] = 120.0
    assert likeliest(job, candidates(job)).label == "none"
    small = _auto(tmp_path, "max_samples=6")
    assert likeliest(small, candidates(small)).label == "ngram-k5"


def test_fixed_runs_that_beat_an_earlier_decisions_winner_beyond_noise_outrank_the_decision(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A decision is a prediction or a few slices; whole fixed runs of this kind are measurements. At the full batch,
    where a shard cannot measure, the decision would otherwise pass itself on from run to run."""
    none = run_job(_job(tmp_path, "spec=none")).folder.root
    k5 = run_job(_job(tmp_path, "spec=ngram", "spec.num_speculative_tokens=5")).folder.root
    earlier = run_job(_auto(tmp_path, "run_name=earlier")).folder.root
    decided = {"winner": "ngram-k5", "measured": True}
    monkeypatch.setattr(likeliest_module, "_decision", lambda root: dict(decided) if root == earlier else None)
    rates = {none: 140.0, k5: 120.0}
    monkeypatch.setattr(likeliest_module, "_rate", lambda root: rates.get(root))
    job = _auto(tmp_path)
    chosen = likeliest(job, candidates(job))
    assert chosen.label == "none" and str(none) in chosen.source and "1.1x ngram-k5's (120.0)" in chosen.source
    assert str(earlier) in chosen.source and "measured on slices" in chosen.source
    # Faster within one run's noise (1.1x): a decision that measured slices stands.
    rates[k5] = 130.0
    assert likeliest(job, candidates(job)).label == "ngram-k5"
    # One that only predicted (the full batch, where a shard cannot measure) is no measurement: the faster runs win
    # outright (help-desk at the full batch kept a k 1 pilot predicted 0.99x spec=none, made 0.94x in whole runs).
    decided["measured"] = False
    chosen = likeliest(job, candidates(job))
    assert chosen.label == "none" and "faster than ngram-k5's (130.0)" in chosen.source
    assert "predicted, not measured" in chosen.source
    decided["measured"] = True
    # The decision's winner is the fastest fixed run too: the decision.
    rates[k5] = 150.0
    assert likeliest(job, candidates(job)) == likeliest_module.Likeliest(
        "ngram-k5", f"the decision of the earlier spec=auto run {earlier}"
    )
    # No fixed run of this kind ran the decision's winner: nothing measured against it, the decision stands.
    decided["winner"] = "suffix-k5"
    assert likeliest(job, candidates(job)).label == "suffix-k5"


def test_a_learned_drafter_a_short_run_measured_slow_stays_ruled_out_once_longer_runs_of_others_exist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bench's rounds: a 6-row sweep ran the head at half n-gram's tok/s; later 12-row runs of the other set-ups
    never ran it. The pilot's rates are the 12-row runs (like with like), but the head is judged among the runs of
    the nearest size that ran it, so it is not measured again in every round at the cost of two engine start-ups."""
    head = tmp_path / "head"
    head.mkdir()
    (head / "config.json").write_text('{"vocab_size": 49152}')
    learned = [f"+spec.auto.checkpoints.eagle3.model={head}", "spec.auto.candidates=[none,ngram-k5,eagle3-k3]"]
    made: dict[Path, float] = {}

    def fixed(rows: int, rate: float, *overrides: str) -> Path:
        root = run_job(_job(tmp_path, *overrides, f"max_samples={rows}", f"run_name=fixed{len(made)}")).folder.root
        made[root] = rate
        return root

    sweep_head = fixed(6, 50.0, "spec=eagle3", f"spec.model={head}")
    fixed(6, 100.0, "spec=ngram", "spec.num_speculative_tokens=5")
    fixed(6, 90.0, "spec=none")
    fixed(12, 120.0, "spec=ngram", "spec.num_speculative_tokens=5")
    fixed(12, 110.0, "spec=none")
    monkeypatch.setattr(likeliest_module, "_rate", lambda root: made.get(root))
    job = _auto(tmp_path, *learned)  # 12 rows
    earlier = _fixed_rates(job)
    assert sorted(earlier) == ["ngram-k5", "none"], "the pilot's evidence: the 12-row runs"
    out = likeliest_module.ruled_out(job, candidates(job))
    assert list(out) == ["eagle3-k3"]
    assert str(sweep_head) in out["eagle3-k3"] and "ngram-k5's 100.0" in out["eagle3-k3"]
    # Within the error of the set-ups it ran beside, the head is measured.
    made[sweep_head] = 95.0
    assert likeliest_module.ruled_out(job, candidates(job)) == {}
    assert likeliest_module.nothing_to_measure(job, candidates(job), "ngram-k5") is None
    made[sweep_head] = 50.0
    assert likeliest_module.nothing_to_measure(job, candidates(job), "ngram-k5") is not None
    # spec=none and a head the runs beside it ruled out: nothing to compare, and still nothing to measure.
    pair = _auto(tmp_path, *learned[:1], "spec.auto.candidates=[none,eagle3-k3]")
    why = likeliest_module.nothing_to_measure(pair, candidates(pair), "none")
    assert why is not None and why.startswith(
        "earlier fixed runs of this kind made no other candidate faster than none by more than a whole run's noise "
        "(1.1x) or ruled it out"
    )


def test_a_set_up_a_short_sweep_measured_slower_than_the_pilots_stays_so_once_longer_runs_of_others_exist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bench's help-desk cell at batch 16: the 200-row sweep made n-gram k 2 0.93x spec=none; the first round's
    1,000-row runs (here 12-row ones) of the others never ran it. Each candidate is judged against the pilot's set-up
    among the runs of the nearest size that ran both, so k 2 is not measured again (an engine start-up, the switch
    back and its slices) when the runs beside spec=none already measured it slower."""
    made: dict[Path, float] = {}

    def fixed(rows: int, rate: float, *overrides: str) -> Path:
        root = run_job(_job(tmp_path, *overrides, f"max_samples={rows}", f"run_name=fixed{len(made)}")).folder.root
        made[root] = rate
        return root

    fixed(6, 90.0, "spec=none")
    k2 = fixed(6, 81.0, "spec=ngram", "spec.num_speculative_tokens=2")
    fixed(6, 86.0, "spec=ngram", "spec.num_speculative_tokens=5")
    fixed(12, 110.0, "spec=none")
    fixed(12, 109.0, "spec=suffix")
    fixed(12, 105.0, "spec=ngram", "spec.num_speculative_tokens=5")
    monkeypatch.setattr(likeliest_module, "_rate", lambda root: made.get(root))
    job = _auto(tmp_path)  # 12 rows
    assert likeliest(job, candidates(job)).label == "none"
    against = likeliest_module.against_pilot(job, candidates(job), "none")
    assert against == {"ngram-k2": (81.0, 90.0), "ngram-k5": (105.0, 110.0), "suffix-k5": (109.0, 110.0)}
    read: list[Path] = []
    monkeypatch.setattr(likeliest_module, "_rate", lambda root: read.append(root) or made.get(root))
    why = likeliest_module.nothing_to_measure(job, candidates(job), "none")
    assert why is not None and "ngram-k2 81.0 tok/s to 90.0" in why and "suffix-k5 109.0 tok/s to 110.0" in why
    assert sorted(read) == sorted(made), "each earlier run's summary read once for both questions"
    # Faster than spec=none beside it in the sweep, but within a whole run's noise (1.06x < UNMEASURED_MARGIN): the
    # few slices that would measure it could not tell it from spec=none either, so none are drained for it (the
    # help-desk cell's round 4: n-gram k 1 at 1.01x spec=none). The plan still reads it as not slower.
    made[k2] = 95.0
    why = likeliest_module.nothing_to_measure(job, candidates(job), "none")
    assert why is not None and "ngram-k2 95.0 tok/s to 90.0" in why
    assert slower_before(likeliest_module.against_pilot(job, candidates(job), "none")) == ["ngram-k5", "suffix-k5"]
    # Faster by more than that noise: left to measure.
    made[k2] = 100.0
    assert likeliest_module.nothing_to_measure(job, candidates(job), "none") is None
    # A pilot no earlier run compared with the others: nothing to judge against, so nothing is ruled so.
    assert likeliest_module.against_pilot(job, candidates(job), "ngram-k3") == {}


def test_each_set_up_is_rated_by_the_median_of_its_runs_not_its_fastest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One run's whole-job figure moves by 10 % or more on these machines: the fastest of several runs favours the
    set-up that ran most often or varies most (help-desk at the full batch: n-gram k 1's fastest of six runs beat
    spec=none's fastest, while its median ran 0.94x none's)."""
    made: dict[Path, float] = {}

    def fixed(rate: float, *overrides: str) -> Path:
        root = run_job(_job(tmp_path, *overrides, f"run_name=fixed{len(made)}")).folder.root
        made[root] = rate
        return root

    for rate in (100.0, 104.0, 150.0):
        fixed(rate, "spec=ngram", "spec.num_speculative_tokens=5")
    for rate in (120.0, 125.0):
        fixed(rate, "spec=none")
    monkeypatch.setattr(likeliest_module, "_rate", lambda root: made.get(root))
    job = _auto(tmp_path)
    chosen = likeliest(job, candidates(job))
    assert chosen.label == "none" and "(122.5 tok/s)" in chosen.source and "the median of 2 runs" in chosen.source
    assert {label: rate for label, (rate, _) in _fixed_rates(job).items()} == {"ngram-k5": 104.0, "none": 122.5}
    assert likeliest_module.against_pilot(job, candidates(job), "none") == {"ngram-k5": (104.0, 122.5)}
