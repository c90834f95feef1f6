"""What a run folder records about its inputs and parts, checked with a fake engine (logic only): a resume over an
edited data file is refused, damaged parts are named and regenerated, the first launch's shard count wins, a shard
finished by another process is left alone, and an MLflow run left RUNNING by a killed launch ends KILLED.
The same situations with real processes are in tests/test_races_cpu.py."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from mlflow.tracking import MlflowClient

from conftest import PROJECT_ROOT, asked_rows, fake_engine
from specbatch.common.atomic_files import atomic_write_text
from specbatch.config import ConfigError
from specbatch.pipeline import merge_run, run_job
from specbatch.run.folder import RunFolder
from specbatch.run.status_merge import RunIncompleteError, run_status

STATUS = PROJECT_ROOT / "jobs" / "status.py"
COMPARE = PROJECT_ROOT / "jobs" / "compare.py"


ORIGINAL = [f"r{i}" for i in range(6)]


def write_rows(path: Path, ids: list[str], text: str = "question") -> None:
    path.write_text("".join(json.dumps({"id": i, "q": f"{text} {i}"}) + "\n" for i in ids))


@pytest.fixture
def data_job(local_job_factory, tmp_path: Path):
    """Jobs over conftest's local file of rows r0..r5, chunks of 2 rows, spec=none. Making a job writes the file
    afresh: tests that edit it make their jobs first."""

    def make(*extra: str):
        return local_job_factory("tracking=off", *extra, rows=6)

    make.data = tmp_path / "rows-6.jsonl"
    return make


def row_ids(layout: RunFolder) -> list[str]:
    return [r for p in sorted(layout.data_dir.glob("part-*.parquet")) for r in pq.read_table(p)["row_id"].to_pylist()]


def test_a_resume_over_an_edited_data_file_is_refused(data_job) -> None:
    job = data_job()
    layout = RunFolder.for_job(job)
    original = data_job.data.read_text()
    with pytest.raises(KeyboardInterrupt):
        run_job(job, engine=fake_engine(job, die_after=2))
    assert row_ids(layout) == ["r0", "r1"]
    # The file is rewritten between the kill and the rerun: other order, other text.
    write_rows(data_job.data, list(reversed(ORIGINAL)), text="edited")
    engine = fake_engine(job)
    with pytest.raises(ConfigError, match=r"dataset.path=.*rows-6.jsonl changed since shard 0/1.*chunk 0.*run_name="):
        run_job(job, engine=engine)
    assert engine.added == [] and row_ids(layout) == ["r0", "r1"]  # nothing generated, nothing mixed

    # Restored, the run finishes with every row once.
    data_job.data.write_text(original)
    result = run_job(job, engine=fake_engine(job))
    assert result.folder.done_marker.exists() and row_ids(layout) == ORIGINAL


def test_an_edit_to_rows_not_generated_yet_is_refused_too(data_job) -> None:
    job = data_job()
    with pytest.raises(KeyboardInterrupt):
        run_job(job, engine=fake_engine(job, die_after=2))
    data_job.data.write_text(data_job.data.read_text().replace("question 5", "question five"))
    with pytest.raises(ConfigError, match="chunk 2"):
        run_job(job, engine=fake_engine(job))


def test_rows_added_to_a_sharded_run_are_refused(data_job) -> None:
    job = data_job("shard.index=0", "shard.count=2", "max_samples=null")
    run_job(job, engine=fake_engine(job))
    other = data_job("shard.index=1", "shard.count=2", "max_samples=null")
    write_rows(data_job.data, [f"r{i}" for i in range(8)])  # shard 0 would now end at r3 instead of r2
    with pytest.raises(ConfigError, match="now gives 8 rows, but this run started with 6"):
        run_job(other, engine=fake_engine(other))


def test_damaged_parts_are_named_by_status_merge_and_compare_and_regenerated(data_job, tmp_path: Path) -> None:
    job = data_job()
    layout = RunFolder.for_job(job)
    run_job(job, engine=fake_engine(job))
    stats_before = json.loads(layout.stats_path.read_text())
    truncated, flipped = layout.part_path(1), layout.part_path(2)
    truncated.write_bytes(truncated.read_bytes()[:100])
    data = bytearray(flipped.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, other bytes
    flipped.write_bytes(bytes(data))

    [state] = run_status(layout.root)
    assert state.state == "damaged" and "part-00001.parquet" in state.problem and "part-00002.parquet" in state.problem
    status = subprocess.run([sys.executable, str(STATUS), str(layout.root)], capture_output=True, text=True)
    assert status.returncode == 1 and "1 damaged of 1 shards" in status.stderr and "truncated" in status.stderr
    with pytest.raises(RunIncompleteError, match="part-00001.parquet: it has .* bytes where"):
        merge_run(layout.root, log_to_mlflow=False)
    compare = subprocess.run(
        [sys.executable, str(COMPARE), str(layout.root), "--no-mlflow", "--out", str(tmp_path / "cmp")],
        capture_output=True,
        text=True,
    )
    assert compare.returncode == 2 and "part-00002.parquet: its content differs" in compare.stderr
    assert "Traceback" not in compare.stderr

    # The rerun does not say "already complete": it regenerates exactly the two damaged parts.
    engine = fake_engine(job)
    result = run_job(job, engine=engine)
    assert result.generated and asked_rows(engine) == ["r2", "r3", "r4", "r5"]
    assert row_ids(layout) == ORIGINAL and run_status(layout.root)[0].state == "done"
    stats_after = json.loads(layout.stats_path.read_text())
    # The first launch's engine counters covered the parts regenerated since: only its surviving part counts now.
    for key in ("rows", "output_tokens", "prompt_tokens"):
        assert stats_after[key] == stats_before[key], key
    assert merge_run(layout.root, log_to_mlflow=False).summary.rows == 6


def test_a_deleted_part_of_a_finished_shard_is_regenerated(data_job) -> None:
    job = data_job()
    layout = RunFolder.for_job(job)
    run_job(job, engine=fake_engine(job))
    layout.part_path(0).unlink()
    assert run_status(layout.root)[0].state == "damaged"
    engine = fake_engine(job)
    run_job(job, engine=engine)
    assert asked_rows(engine) == ["r0", "r1"] and row_ids(layout) == ORIGINAL


def test_a_shard_finished_by_another_process_meanwhile_is_left_alone(data_job, monkeypatch) -> None:
    job = data_job("tracking=sqlite", "tracking.experiment=race")
    layout = RunFolder.for_job(job)
    first = run_job(job, engine=fake_engine(job))
    stats = layout.stats_path.read_text()
    finished_at = layout.done_marker.read_text()

    # The second launch looked before the first one wrote its marker: it sees no marker at its first look only.
    real_exists = Path.exists
    looks = {"done": 0}

    def exists(self: Path) -> bool:
        if self == layout.done_marker and looks["done"] == 0:
            looks["done"] += 1
            return False
        return real_exists(self)

    monkeypatch.setattr(Path, "exists", exists)
    engine = fake_engine(job)
    again = run_job(job, engine=engine)
    monkeypatch.undo()
    assert looks["done"] == 1 and not again.generated and engine.added == []
    assert layout.stats_path.read_text() == stats and layout.done_marker.read_text() == finished_at
    assert again.summary == first.summary
    client = MlflowClient(job.tracking.uri)
    runs = client.search_runs([client.get_experiment_by_name("race").experiment_id])
    assert [r.info.status for r in runs] == ["FINISHED"]  # no second run


def test_an_mlflow_run_left_running_by_a_killed_launch_ends_killed(data_job) -> None:
    job = data_job("tracking=sqlite", "tracking.experiment=killed")
    assert RunFolder.for_job(data_job()) == RunFolder.for_job(job)  # tracking is not part of the run folder
    layout = RunFolder.for_job(job)
    with pytest.raises(KeyboardInterrupt):
        run_job(job, engine=fake_engine(job, die_after=2))
    client = MlflowClient(job.tracking.uri)
    experiment = client.get_experiment_by_name("killed").experiment_id
    [failed] = client.search_runs([experiment])
    # A SIGKILL runs no handler: the run stays RUNNING and the shard keeps the record of it.
    client.update_run(failed.info.run_id, status="RUNNING")
    atomic_write_text(layout.mlflow_active_path, json.dumps({"run_id": failed.info.run_id}))

    # A launch with tracking off cannot end it and keeps the record (here it dies before its first chunk).
    untracked = data_job()
    with pytest.raises(KeyboardInterrupt):
        run_job(untracked, engine=fake_engine(untracked, die_after=0))
    assert layout.mlflow_active_path.exists()
    assert [r.info.status for r in client.search_runs([experiment])] == ["RUNNING"]

    run_job(job, engine=fake_engine(job))
    runs = client.search_runs([experiment], order_by=["start_time"])
    assert [r.info.status for r in runs] == ["KILLED", "FINISHED"]
    assert not layout.mlflow_active_path.exists()


def test_a_damaged_part_of_an_unfinished_shard_is_regenerated(data_job) -> None:
    job = data_job()
    layout = RunFolder.for_job(job)
    with pytest.raises(KeyboardInterrupt):
        run_job(job, engine=fake_engine(job, die_after=2))
    part = layout.part_path(0)
    part.write_bytes(part.read_bytes()[:-10])  # e.g. a disk that lost the file's tail
    assert [(s.state, s.parts) for s in run_status(layout.root)] == [("damaged", 1)]
    engine = fake_engine(job)
    run_job(job, engine=engine)
    assert len(engine.added) == 6 and row_ids(layout) == ORIGINAL


def test_a_damaged_source_record_is_named_by_status_and_resume_and_once_removed_is_recorded_again(data_job) -> None:
    job = data_job()
    layout = RunFolder.for_job(job)
    with pytest.raises(KeyboardInterrupt):
        run_job(job, engine=fake_engine(job, die_after=2))
    layout.source_record_path.write_text('{"chunks": ["')
    said = f"{layout.source_record_path} is damaged (not JSON: "
    [state] = run_status(layout.root)
    assert state.state == "damaged" and state.problem.startswith(said) and "remove it" in state.fix
    engine = fake_engine(job)
    with pytest.raises(ConfigError, match=re.escape(said)):
        run_job(job, engine=engine)
    assert engine.added == []
    layout.source_record_path.unlink()
    run_job(job, engine=fake_engine(job))
    assert row_ids(layout) == ORIGINAL and len(json.loads(layout.source_record_path.read_text())["chunks"]) == 3


@pytest.mark.parametrize("damage", ["deleted", "cut short", "emptied"])
def test_a_lost_or_damaged_profile_is_named_by_status_and_rebuilt_from_the_rows_by_merge_and_a_rerun(
    data_job, damage: str, caplog
) -> None:
    """The rows are whole, so status keeps the shard done and says in one line what is wrong with its profile; merge
    and a rerun (which generates nothing) write it again as the rows make it."""
    job = data_job("spec=ngram")
    layout = RunFolder.for_job(job)
    run_job(job, engine=fake_engine(job))
    profile = layout.profile_path
    whole = json.loads(profile.read_text())
    assert whole["schema_version"] == "1.0" and whole["specbatch"]["drafts"] > 0

    def spoil() -> None:
        if damage == "deleted":
            profile.unlink()
        else:
            profile.write_text('{"schema_version": "1.' if damage == "cut short" else "{}")

    said = {
        "deleted": f"{profile.relative_to(layout.root)} is missing",
        "cut short": f"{profile} is damaged (not JSON: ",
        "emptied": f"{profile} is damaged (it lacks schema_version)",
    }[damage]
    spoil()
    [state] = run_status(layout.root)
    assert state.state == "done" and state.problem.startswith(said) and "rebuilds it from the rows" in state.fix
    status = subprocess.run([sys.executable, str(STATUS), str(layout.root)], capture_output=True, text=True)
    said_once = [line for line in status.stderr.splitlines() if "speculation_profile.json" in line]
    assert status.returncode == 0 and "1 done, 0 running" in status.stderr and len(said_once) == 1, status.stderr
    with caplog.at_level("WARNING", logger="specbatch.run.status_merge"):
        merge_run(layout.root, log_to_mlflow=False)
    assert json.loads(profile.read_text()) == whole and said in caplog.text and "rebuilt from the rows" in caplog.text
    assert run_status(layout.root)[0].problem is None

    spoil()
    engine = fake_engine(job)
    with caplog.at_level("WARNING", logger="specbatch.run.executor"):
        again = run_job(job, engine=engine)
    assert not again.generated and engine.added == [] and json.loads(profile.read_text()) == whole


def test_a_run_without_a_profile_due_is_not_said_to_lack_one(data_job) -> None:
    """spec=none writes no profile, and nothing says it is missing."""
    job = data_job()
    layout = RunFolder.for_job(job)
    run_job(job, engine=fake_engine(job))
    assert not layout.profile_path.exists() and run_status(layout.root)[0].problem is None
