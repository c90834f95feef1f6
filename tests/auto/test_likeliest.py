"""The set-up a spec=auto shard pilots on, from earlier runs of the same kind of job (whole runs on the dummy backend:
no model)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import compose_job
from specbatch.auto import likeliest as likeliest_module
from specbatch.auto.candidates import candidates
from specbatch.auto.likeliest import likeliest
from specbatch.pipeline import run_job
from specbatch.run.folder import RunFolder
from specbatch.run.status_merge import finished_summary

CANDIDATES = "spec.auto.candidates=[none,ngram-k2,ngram-k5,suffix-k5]"


def _job(root: Path, *extra: str):
    return compose_job([f"output_root={root}", "engine.backend=dummy", "tracking=off", "max_samples=12", *extra])


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
