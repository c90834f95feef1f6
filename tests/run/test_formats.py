"""Run folders written by older versions (run/records): a folder of each older run format, built here from a run
of today's job rewritten as that version wrote it, is found again by its job, read by status, merge and compare as
today's, and keeps its digests. A record from a newer version, or a damaged one, is refused in one line naming the
file and what to do."""

from __future__ import annotations

import json
import logging
import runpy
import sys
from pathlib import Path

import pytest
from test_folder import run_reader

from conftest import PROJECT_ROOT, fake_engine
from specbatch.analysis.report import find_runs, run_compare
from specbatch.config import ConfigError, run_folder_digest
from specbatch.config.identity import recorded_run_folder_digest, workload_digest
from specbatch.pipeline import merge_run, run_job
from specbatch.run.folder import RunFolder, read_run
from specbatch.run.records.decision_file import DECISION_FORMAT
from specbatch.run.records.record_files import RecordError
from specbatch.run.records.run_json import RUN_FORMAT
from specbatch.run.status_merge import run_status


def as_format_1(folder: RunFolder) -> None:
    """Rewrite a run folder of today's job as the first versions wrote it: run.json without format and without the
    config fields added since (each declares the value those runs had); part stats without their launch, checksum
    and batch, and with the chunk's own generate seconds; no launch records."""
    record = json.loads(folder.run_json.read_text())
    del record["format"]
    del record["config"]["engine"]["backend"]
    del record["config"]["spec"]["k_schedule"]
    del record["config"]["repeat"]
    folder.run_json.write_text(json.dumps(record))
    for number in folder.part_numbers():
        path = folder.part_stats_path(number)
        stats = json.loads(path.read_text())
        for key in ("launch", "part", "concurrency"):
            del stats[key]
        # Each chunk had its own generate call, and its stats its own seconds (not the launch's time so far).
        stats["seconds"] = stats.pop("elapsed")
        path.write_text(json.dumps(stats))
    for launch in folder.stats_dir.glob("launch-*.json"):
        launch.unlink()


OLDER_FORMATS = {1: as_format_1}


@pytest.mark.parametrize("version", sorted(OLDER_FORMATS))
def test_a_run_of_an_older_format_is_found_read_merged_and_compared_as_today(
    local_job_factory, tmp_path: Path, version: int
) -> None:
    runs = {}
    for spec in ("none", "ngram"):
        job = local_job_factory(f"spec={spec}", "max_samples=4", rows=4)
        result = run_job(job, engine=fake_engine(job))
        runs[spec] = (job, result.folder)
    today = {spec: json.loads(folder.run_json.read_text()) for spec, (_, folder) in runs.items()}
    assert {record["format"] for record in today.values()} == {RUN_FORMAT}
    for _, folder in runs.values():
        OLDER_FORMATS[version](folder)

    for spec, (job, folder) in runs.items():
        # Read as today's version writes it, with the same workload digest (the baseline is found the same way).
        assert read_run(folder.root) == today[spec]
        assert workload_digest(read_run(folder.root)["config"]) == workload_digest(today[spec]["config"])
        # The job finds its folder again (same digest) and sees it complete: nothing is generated twice.
        assert RunFolder.for_job(job).root == folder.root
        again = run_job(job, engine=fake_engine(job))
        assert not again.generated
        assert [s.state for s in run_status(folder.root)] == ["done"]
        merged = merge_run(folder.root, log_to_mlflow=False)
        assert merged.summary.rows == 4
    # A shard of the old format killed after its last part, before its summary: the relaunch generates nothing and
    # sums the summary from the old parts' own figures (no launch recorded them).
    # Both runs, so that compare sees both batches as such runs had them (a chunk per call: chunk_size=2).
    for job, folder in runs.values():
        before = folder.read_summary()
        folder.done_marker.unlink()
        folder.stats_path.unlink()
        again = run_job(job, engine=fake_engine(job))
        assert not again.generated and again.summary.rows == 4 and again.summary.counters_scope == "requests"
        assert again.summary.accepted_tokens == before.accepted_tokens and again.summary.drafts == before.drafts
        assert again.summary.concurrency is None
    # The file on disk is the run's: reading it never rewrote it.
    assert "format" not in json.loads(runs["ngram"][1].run_json.read_text())

    compared = run_compare(find_runs([tmp_path / "outputs"]), tmp_path / "comparison", log_to_mlflow=False)
    rows = {row.method: row for row in compared.comparison.rows}
    assert set(rows) == {"none", "ngram"}
    assert rows["ngram"].engine == "vllm" and rows["ngram"].k_schedule is None and rows["ngram"].repeats == 1
    assert rows["ngram"].rows_compared == 4 and rows["ngram"].batch_size == 2


def test_a_run_of_a_newer_format_is_one_error_naming_the_file(local_job_factory, monkeypatch, caplog) -> None:
    job = local_job_factory("spec=none", rows=2)
    folder = run_job(job, engine=fake_engine(job)).folder
    record = json.loads(folder.run_json.read_text())
    folder.run_json.write_text(json.dumps({**record, "format": RUN_FORMAT + 1}))
    said = f"{folder.run_json} was written by a newer version of specbatch"
    with pytest.raises(ConfigError, match=said):
        read_run(folder.root)
    # jobs/status.py and jobs/merge.py say it in one line and exit 2, as for a folder that is no run.
    for argv in (["status.py", str(folder.root)], ["merge.py", str(folder.root), "--no-mlflow"]):
        monkeypatch.setattr(sys, "argv", argv)
        caplog.clear()
        assert runpy.run_path(str(PROJECT_ROOT / "jobs" / argv[0]))["main"]() == 2, argv
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR][0].startswith(said)


# Each JSON record of a run folder: its reader, a record as written, and words of what the one line says to do.
SHARD = "stats/shard-00000-of-00001"
RECORDS = {
    "run.json": (RunFolder.read_run_record, {"format": RUN_FORMAT, "config": {}, "shard_count": 1}, "restore it"),
    f"{SHARD}/source.json": (RunFolder.read_source_record, {"chunks": []}, "the shard's next launch records"),
    f"{SHARD}/launch-l1.json": (
        lambda folder: folder.read_launch_record("l1"),
        {"parts": [0], "seconds": 1.0, "counters": None},
        "counts the launch's parts by their own figures",
    ),
    "decision.json": (
        RunFolder.read_decision,
        {"format": DECISION_FORMAT, "winner": "none", "winner_caption": "none", "why": "-", "measured": False}
        | {"candidates": []},
        "remove it so that the next shard to finish its measurements decides again",
    ),
    f"{SHARD}/auto-plan.json": (
        RunFolder.read_auto_plan,
        {"format": DECISION_FORMAT, "predicted": [], "measure": [], "measuring": False, "why": "-"},
        "remove it and rerun the shard",
    ),
}
DAMAGES = {
    "cut": "is damaged (not JSON: ",
    "not an object": "is damaged (not a JSON object)",
    "a key left out": "is damaged (it lacks ",
    "newer": "was written by a newer version of specbatch",
}


@pytest.mark.parametrize(
    ("name", "damage"),
    # Source digests and launch records carry no format.
    [(name, damage) for name in RECORDS for damage in DAMAGES if damage != "newer" or "format" in RECORDS[name][1]],
)
def test_a_damaged_record_is_one_error_naming_the_file_and_what_to_do(tmp_path: Path, name: str, damage: str) -> None:
    read, record, fix = RECORDS[name]
    folder, path = RunFolder(tmp_path), tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    assert read(folder).keys() >= record.keys()  # read whole (run.json and launch records upgraded)
    text = {
        "cut": json.dumps(record)[:10],
        "not an object": json.dumps([record]),
        "a key left out": json.dumps({key: value for key, value in record.items() if key == "format"}),
        "newer": json.dumps({**record, "format": record.get("format", 1) + 1}),
    }[damage]
    path.write_text(text)
    with pytest.raises(RecordError) as caught:
        read(folder)
    message = str(caught.value)
    assert message.startswith(f"{path} {DAMAGES[damage]}") and "\n" not in message
    assert (fix if damage != "newer" else "read it with that version, or update this checkout") in message
    assert isinstance(caught.value, ConfigError), "a job refuses it in one line (jobs/generate.py)"


def test_a_run_json_edited_by_hand_is_refused_by_every_reader_naming_the_digest_and_the_fix(
    local_job_factory, tmp_path: Path, monkeypatch, caplog
) -> None:
    """The folder's name carries the digest of the config its rows were generated from; a run.json holding another
    (edited by hand) was read as the run's by every reader. Now each says so in one line, the job's relaunch too."""
    job = local_job_factory("tracking=off", "repeat=2", rows=2)
    folder = run_job(job, engine=fake_engine(job)).folder
    digest = run_folder_digest(job)
    assert folder.root.name.endswith(f"-{digest}-rep2")
    record = json.loads(folder.run_json.read_text())
    record["config"]["sampling"]["max_tokens"] += 1
    folder.run_json.write_text(json.dumps(record))
    edited = recorded_run_folder_digest(record["config"])
    moved = folder.root.with_name(folder.root.name.replace(digest, edited))
    said = (
        f"{folder.run_json} does not hold the config its folder was made for: the folder's name carries "
        f"{digest}-rep2, the config in it gives {edited}-rep2 (edited by hand?): restore run.json from a copy of "
        f"the run folder, or, to keep the edit, move the folder to {moved} (then it is a run of the edited config)"
    )
    with pytest.raises(RecordError) as caught:
        read_run(folder.root)
    assert str(caught.value) == said
    for script in ("status.py", "merge.py", "predict.py", "check_lossless.py", "compare.py"):
        args = [str(folder.root)] + (["--out", str(tmp_path / "comparison")] if script == "compare.py" else [])
        code, errors = run_reader(script, args, monkeypatch, caplog)
        assert code == 2 and len(errors) == 1 and said in errors[0], (script, errors)
    assert not {"merged", "prediction", "lossless"} & {p.name for p in folder.root.iterdir()}
    # The job's relaunch of an unfinished shard reads run.json before it generates anything.
    folder.done_marker.unlink()
    with pytest.raises(RecordError, match="does not hold the config its folder was made for"):
        run_job(job, engine=fake_engine(job))
    # Moved as the line says, the folder is a run of the edited config again.
    folder.root.rename(moved)
    assert read_run(moved) == {**record, "format": RUN_FORMAT}


def test_a_run_whose_config_held_a_secret_is_read_though_its_record_is_masked(local_job_factory, monkeypatch) -> None:
    # The folder's digest is of the real value, run.json holds it masked: there is nothing to hold the record to.
    monkeypatch.setenv("HF_TOKEN", "hf_secret_in_the_template")
    job = local_job_factory("tracking=off", "dataset.template='{q} hf_secret_in_the_template'", rows=2)
    folder = run_job(job, engine=fake_engine(job)).folder
    assert "hf_secret_in_the_template" not in folder.run_json.read_text()
    assert recorded_run_folder_digest(read_run(folder.root)["config"]) is None
    folder.done_marker.unlink()
    assert not run_job(job, engine=fake_engine(job)).generated
