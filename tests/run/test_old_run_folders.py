"""Run folders written by main at 5dfb33a, before each record had its owner (specbatch.run.records), kept as that
version wrote them in tests/fixtures/run_folders_5dfb33a: today's code finds them done by their own command,
finishes one cut short, reports and merges them, and compares them.

The fixture was made in a folder holding its ``rows.jsonl`` (8 rows), with ``SPECBATCH_CACHE=cache`` (a link to the
cache of the embedded model, so that the recorded model path is relative and the folders' digests do not depend on
the machine), on a machine with native bf16 (model.dtype=auto became bfloat16), by main's own jobs:

    python jobs/generate.py engine.backend=dummy dataset=local dataset.path=rows.jsonl "dataset.template='{q}'"
        dataset.id_column=id chunk_size=2 tracking=off output_root=outputs sampling.max_tokens=16 spec=<setup>
    (spec=none; spec=ngram; spec=auto 'spec.auto.candidates=[none,ngram-k3]' spec.auto.pilot_rows=2
     spec.auto.slice_rows=2 spec.auto.budget=0.5)
    python jobs/merge.py <each run folder> --no-mlflow; python jobs/predict.py <the ngram run folder>

so it holds every record kind: run.json, parts and their stats, launch and source records, shard summaries,
speculation profiles, spec=auto's decision and plan, merged manifests and summaries, and a prediction.
"""

from __future__ import annotations

import hashlib
import json
import runpy
import shutil
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import PROJECT_ROOT, compose_job
from specbatch.assets.cache import default_cache_dir
from specbatch.config import JobConfig
from specbatch.pipeline import merge_run, run_job
from specbatch.run.folder import RunFolder
from specbatch.run.profile_schema import schema_problems
from specbatch.run.records.prediction_file import PREDICTION_DIR, read_prediction
from specbatch.run.records.profile_file import read_profile
from specbatch.run.status_merge import run_status

FIXTURE = PROJECT_ROOT / "tests" / "fixtures" / "run_folders_5dfb33a"
RUNS = Path("outputs") / "runs" / "local" / "smollm2-135m-instruct"
COMMON = [
    "engine.backend=dummy",
    "dataset=local",
    "dataset.path=rows.jsonl",
    "dataset.template='{q}'",
    "dataset.id_column=id",
    "chunk_size=2",
    "tracking=off",
    "output_root=outputs",
    "sampling.max_tokens=16",
    # Recorded on a machine with native bf16, where model.dtype=auto meant bfloat16 (their run.json and digests say
    # so); on an AVX2-only machine auto means float32 and names other folders, so the dtype that ran is given.
    "model.dtype=bfloat16",
]
SETUPS = {
    "none-65f58448": ["spec=none"],
    "ngram-k3-c79bdf77": ["spec=ngram"],
    "auto-b5cda9ff": [
        "spec=auto",
        "spec.auto.candidates=[none,ngram-k3]",
        "spec.auto.pilot_rows=2",
        "spec.auto.slice_rows=2",
        "spec.auto.budget=0.5",
    ],
}


@pytest.fixture
def old_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the fixture, as the working directory its jobs were run from."""
    copy = tmp_path / "old"
    shutil.copytree(FIXTURE, copy)
    (copy / "cache").symlink_to(default_cache_dir(), target_is_directory=True)
    monkeypatch.setenv("SPECBATCH_CACHE", "cache")
    monkeypatch.chdir(copy)
    return copy


def job_of(name: str) -> JobConfig:
    return compose_job([*COMMON, *SETUPS[name]])


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_fixture_is_as_that_version_wrote_it() -> None:
    # No record stamped by a version that came later (parts' stats and launch records had no format then).
    for name in SETUPS:
        run = json.loads((FIXTURE / RUNS / name / "run.json").read_text())
        assert run["format"] == 2
        for stats in (FIXTURE / RUNS / name / "stats" / "shard-00000-of-00001").glob("*.json"):
            assert "format" not in json.loads(stats.read_text()) or stats.name == "auto-plan.json", stats
    sizes = sum(p.stat().st_size for p in FIXTURE.rglob("*") if p.is_file())
    assert sizes < 400_000


def test_each_old_run_is_found_done_by_its_own_command(old_runs: Path) -> None:
    for name in SETUPS:
        before = {p: digest(p) for p in (old_runs / RUNS / name).rglob("*") if p.is_file()}
        result = run_job(job_of(name))
        assert result.folder.root == (old_runs / RUNS / name).resolve(), name
        assert not result.generated and result.summary.rows == 8
        # Finding it done wrote nothing into it (no record of it is rewritten).
        assert {p: digest(p) for p in before} == before


def test_an_old_run_cut_short_is_finished_and_keeps_its_old_parts(old_runs: Path) -> None:
    job = job_of("ngram-k3-c79bdf77")
    folder = RunFolder.for_job(job)
    rows = [r for part in folder.parts() for r in pq.read_table(part).to_pylist()]
    kept = {n: digest(folder.part_path(n)) for n in range(3)}
    # As a kill before the last chunk leaves it: no done marker, no summary, the last part and its stats missing.
    folder.unmark_done()
    folder.stats_path.unlink()
    folder.drop_part(3)

    result = run_job(job)
    assert result.generated and folder.is_done() and result.summary.rows == 8
    assert {n: digest(folder.part_path(n)) for n in range(3)} == kept
    again = [r for part in folder.parts() for r in pq.read_table(part).to_pylist()]
    assert [(r["row_id"], r["completion_token_ids"]) for r in again] == [
        (r["row_id"], r["completion_token_ids"]) for r in rows
    ]
    assert [s.state for s in run_status(folder.root)] == ["done"]


def test_old_runs_are_reported_merged_and_compared(
    old_runs: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in SETUPS:
        root = old_runs / RUNS / name
        monkeypatch.setattr(sys, "argv", ["status.py", str(root)])
        assert runpy.run_path(str(PROJECT_ROOT / "jobs" / "status.py"))["main"]() in (0, None), name
        merged = merge_run(root, log_to_mlflow=False)
        assert merged.summary.rows == 8 and len(merged.parts) == 4
    prediction = read_prediction(old_runs / RUNS / "ngram-k3-c79bdf77" / PREDICTION_DIR)
    assert prediction["completions"] == 8
    # Its set-ups, in specbatch's own shape then, read as speculation profiles in ModelOpt's schema, not measured;
    # and so do the runs' profiles, measured.
    assert [p["specbatch"]["setup"] for p in prediction["setups"]][:2] == ["ngram-k1-n2-4", "ngram-k2-n2-4"]
    assert all(schema_problems(p) == [] and p["measured"] is False for p in prediction["setups"])
    for profile_path in (old_runs / RUNS / "ngram-k3-c79bdf77").rglob("speculation_profile.json"):
        profile = read_profile(profile_path)
        assert schema_problems(profile) == [] and profile["measured"] and profile["specbatch"]["rows"] == 8

    out = old_runs / "comparison"
    argv = ["compare.py", str(old_runs / "outputs" / "runs"), "--out", str(out), "--no-mlflow"]
    monkeypatch.setattr(sys, "argv", argv)
    capsys.readouterr()
    assert runpy.run_path(str(PROJECT_ROOT / "jobs" / "compare.py"))["main"]() == 0
    shown = capsys.readouterr().out
    assert "ngram" in shown and "auto" in shown
    compared = json.loads(next(out.glob("*.json")).read_text())
    # The baseline, and each run against it on all 8 rows (spec=auto as one set-up beside the fixed ones).
    assert {r["method"]: r["rows_compared"] for r in compared["rows"]} == {"none": 0, "ngram": 8, "auto": 8}
