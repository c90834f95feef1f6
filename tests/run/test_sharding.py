"""Shards, chunks and resume with a fake engine (logic only): every row exactly once, restarts redo one chunk."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from mlflow.tracking import MlflowClient

from conftest import PROJECT_ROOT, asked_rows, fake_engine
from specbatch.config import ConfigError, ShardConfig
from specbatch.pipeline import merge_run, run_job
from specbatch.run.folder import RunFolder
from specbatch.run.locks import ShardBusyError, is_locked, shard_lock
from specbatch.run.sharding import Shard, chunk_ranges, resolve_shard, shard_range
from specbatch.run.status_merge import RunIncompleteError, run_status

STATUS = PROJECT_ROOT / "jobs" / "status.py"


def test_explicit_shard_wins_over_slurm() -> None:
    env = {"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "4"}
    assert resolve_shard(ShardConfig(index=1, count=2), env) == Shard(1, 2)
    assert resolve_shard(ShardConfig(), env) == Shard(3, 4)
    assert resolve_shard(ShardConfig(), {}) == Shard(0, 1)


def test_slurm_arrays_that_do_not_start_at_zero_or_step() -> None:
    # sbatch --array=5-8: ids 5..8, min 5.
    assert resolve_shard(
        ShardConfig(), {"SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_TASK_MIN": "5", "SLURM_ARRAY_TASK_COUNT": "4"}
    ) == Shard(2, 4)
    # sbatch --array=1-7:2: ids 1, 3, 5, 7.
    env = {
        "SLURM_ARRAY_TASK_ID": "5",
        "SLURM_ARRAY_TASK_MIN": "1",
        "SLURM_ARRAY_TASK_STEP": "2",
        "SLURM_ARRAY_TASK_COUNT": "4",
    }
    assert resolve_shard(ShardConfig(), env) == Shard(2, 4)
    with pytest.raises(ConfigError, match="set shard.index and shard.count explicitly"):
        resolve_shard(ShardConfig(), {"SLURM_ARRAY_TASK_ID": "9", "SLURM_ARRAY_TASK_COUNT": "4"})


@pytest.mark.parametrize("rows", [0, 1, 7, 100, 101])
@pytest.mark.parametrize("count", [1, 2, 3, 8])
def test_shards_cover_every_row_exactly_once(rows: int, count: int) -> None:
    covered = [i for index in range(count) for i in shard_range(rows, Shard(index, count))]
    assert covered == list(range(rows))
    sizes = [len(shard_range(rows, Shard(index, count))) for index in range(count)]
    assert max(sizes) - min(sizes) <= 1
    for index in range(count):
        span = shard_range(rows, Shard(index, count))
        assert [i for c in chunk_ranges(span, 3) for i in c] == list(span)


@pytest.fixture
def make_job(local_job_factory):
    return lambda *extra: local_job_factory("tracking=off", *extra, rows=7)


def read_ids(result) -> list[str]:
    return [r["row_id"] for p in result.parquet_files for r in pq.read_table(p).to_pylist()]


def test_two_shards_write_every_row_once_in_chunk_parts(make_job) -> None:
    ids = []
    for index in range(2):
        job = make_job(f"shard.index={index}", "shard.count=2")
        engine = fake_engine(job)
        result = run_job(job, engine=engine)
        assert result.folder.done_marker.is_file() and result.folder.shard_tag == f"shard-0000{index}-of-00002"
        # Rows 0-2 and 3-6, two per chunk.
        assert asked_rows(engine) == (["r0", "r1", "r2"] if index == 0 else ["r3", "r4", "r5", "r6"])
        assert [p.name for p in result.parquet_files] == [f"part-0000{n}.parquet" for n in range(2)]
        rows = len(engine.added)
        assert result.summary.rows == rows and result.summary.output_tokens == 2 * rows
        ids += read_ids(result)
    assert sorted(ids) == sorted(f"r{i}" for i in range(7))


@pytest.mark.parametrize("count", [1, 2])
def test_duplicate_ids_get_the_same_verdict_whatever_the_shard_count(job_factory, tmp_path: Path, count: int) -> None:
    # r1 twice, one in each half: with two shards each shard alone is unique, the merged output would not be.
    data = tmp_path / "dup.jsonl"
    data.write_text("".join(json.dumps({"id": f"r{i % 3}", "q": str(i)}) + "\n" for i in (0, 1, 2, 4)))
    base = ["spec=none", "dataset=local", f"dataset.path={data}", "dataset.template='{q}'", "dataset.id_column=id"]
    for index in range(count):
        job = job_factory(*base, f"shard.index={index}", f"shard.count={count}")
        with pytest.raises(ConfigError, match="dataset.id_column=id is not unique: 'r1' appears twice"):
            run_job(job, engine=fake_engine(job))


def test_a_killed_shard_resumes_from_its_last_finished_chunk(make_job) -> None:
    job = make_job()
    layout = RunFolder.for_job(job)
    with pytest.raises(KeyboardInterrupt):
        run_job(job, engine=fake_engine(job, die_after=4))
    assert sorted(p.name for p in layout.data_dir.glob("part-*.parquet")) == [
        "part-00000.parquet",
        "part-00001.parquet",
    ]
    assert not layout.done_marker.exists()
    # A writer killed mid-rename leaves a temporary file; it is never data and goes away on the rerun.
    (layout.data_dir / ".part-00002.parquet.tmp-999").write_bytes(b"half a file")
    engine = fake_engine(job)
    result = run_job(job, engine=engine)
    assert asked_rows(engine) == ["r4", "r5", "r6"]  # only chunks 2 and 3
    assert sorted(read_ids(result)) == sorted(f"r{i}" for i in range(7))
    assert not list(layout.data_dir.glob(".*tmp*"))
    assert result.summary.rows == 7 and result.summary.output_tokens == 2 * 7  # earlier chunks' figures kept
    # Finished: a further rerun generates nothing and needs no engine.
    assert run_job(job).generated is False


def test_a_changed_shard_count_is_refused(make_job) -> None:
    job = make_job("shard.index=0", "shard.count=2")
    run_job(job, engine=fake_engine(job))
    other = make_job("shard.index=1", "shard.count=3")
    with pytest.raises(ConfigError, match="started with shard.count=2; relaunching it with shard.count=3"):
        run_job(other, engine=fake_engine(other))


def test_a_second_writer_of_the_same_shard_is_refused(make_job) -> None:
    job = make_job()
    layout = RunFolder.for_job(job)
    with shard_lock(layout.lock_path, "0/1"):
        assert is_locked(layout.lock_path)
        with pytest.raises(ShardBusyError, match="shard 0/1 is being generated by pid"):
            run_job(job, engine=fake_engine(job))
    assert not is_locked(layout.lock_path)
    assert run_job(job, engine=fake_engine(job)).generated


def test_status_and_merge_refuse_until_every_shard_is_done_then_add_up(make_job, tmp_path: Path) -> None:
    jobs = [
        make_job(
            f"shard.index={i}",
            "shard.count=3",
            "chunk_size=1",
            "tracking=sqlite",
            "tracking.experiment=shards",
            "spec=ngram",
        )
        for i in range(3)
    ]
    first = run_job(jobs[0], engine=fake_engine(jobs[0]))
    root = first.folder.root
    # Shard 1 dies after its first chunk; shard 2 never started.
    with pytest.raises(KeyboardInterrupt):
        run_job(jobs[1], engine=fake_engine(jobs[1], die_after=1))
    assert [(s.index, s.state, s.parts) for s in run_status(root)] == [
        (0, "done", 2),
        (1, "partial", 1),
        (2, "missing", 0),
    ]
    with shard_lock(RunFolder(root, 2, 3).lock_path, "2/3"):
        assert run_status(root)[2].state == "running"
    with pytest.raises(RunIncompleteError, match=r"2 of 3 shards are not done: 1 \(partial\), 2 \(missing\)"):
        merge_run(root)
    status = subprocess.run([sys.executable, str(STATUS), str(root)], capture_output=True, text=True, timeout=120)
    assert status.returncode == 1 and "1 done, 0 running, 1 partial, 1 missing of 3 shards" in status.stderr

    shard_summaries = [first.summary]
    for job in jobs[1:]:
        shard_summaries.append(run_job(job, engine=fake_engine(job)).summary)
    result = merge_run(root)
    manifest = json.loads(result.manifest.read_text())
    ids = [r["row_id"] for part in manifest["parts"] for r in pq.read_table(root / part).to_pylist()]
    assert sorted(ids) == sorted(f"r{i}" for i in range(7)) and manifest["rows"] == 7
    assert result.summary.rows == sum(s.rows for s in shard_summaries) == 7
    assert result.summary.output_tokens == sum(s.output_tokens for s in shard_summaries)
    assert result.summary.generation_seconds == pytest.approx(sum(s.generation_seconds for s in shard_summaries))
    assert json.loads(result.summary_path.read_text()) == result.summary.to_dict()
    # The speculation profile of each shard, and of the whole run: the same figures as the summaries.
    profile = json.loads(RunFolder(root).merged_profile_path.read_text())
    assert profile["specbatch"]["drafts"] == result.summary.drafts > 0 and profile["specbatch"]["rows"] == 7
    assert profile["mean_accept_length"] == pytest.approx(result.summary.mean_acceptance_length, abs=1e-6)
    shard_drafts = [
        json.loads(RunFolder(root, i, 3).profile_path.read_text())["specbatch"]["drafts"] for i in range(3)
    ]
    assert sum(shard_drafts) == profile["specbatch"]["drafts"]

    client = MlflowClient(tracking_uri=jobs[0].tracking.uri)
    runs = client.search_runs([client.get_experiment_by_name("shards").experiment_id])
    [parent] = [r for r in runs if r.data.tags.get("merged") == "true"]
    assert parent.data.metrics["rows"] == 7 and parent.data.metrics["output_tokens"] == result.summary.output_tokens
    listed = [a.path for a in client.list_artifacts(parent.info.run_id, "speculation_profile")]
    assert listed == ["speculation_profile/speculation_profile.json"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert {r.data.tags["shard"] for r in children} >= {"0/3", "1/3", "2/3"}
    status = subprocess.run([sys.executable, str(STATUS), str(root)], capture_output=True, text=True, timeout=120)
    assert status.returncode == 0 and "3 done" in status.stderr


def test_a_resumed_shard_adds_up_every_launch_once(make_job) -> None:
    """Figures of a shard finished by several launches: a killed launch counts only the parts it wrote (their own
    figures, and its time up to its last part); a launch that ended counts its engine counters and loop time; parts
    from before streaming (no launch) count their own seconds."""
    job = make_job("spec=ngram")
    layout = RunFolder.for_job(job)
    with pytest.raises(KeyboardInterrupt):
        run_job(job, engine=fake_engine(job, die_after=2))  # killed after part 0, chunk 1 in flight
    killed = json.loads(layout.part_stats_path(0).read_text())
    # Part 1 as a launch before streaming would have left it: its own generate time, no launch.
    with pytest.raises(KeyboardInterrupt):
        run_job(job, engine=fake_engine(job, die_after=2))  # this launch writes part 1 only, then dies
    old = json.loads(layout.part_stats_path(1).read_text())
    del old["launch"], old["elapsed"]
    layout.part_stats_path(1).write_text(json.dumps({**old, "seconds": 5.0}))

    result = run_job(job, engine=fake_engine(job))
    [record] = [json.loads(p.read_text()) for p in layout.part_stats_path(0).parent.glob("launch-*.json")]
    assert sorted(record["parts"]) == [2, 3]
    summary = result.summary
    assert summary.generation_seconds == pytest.approx(killed["elapsed"] + 5.0 + record["seconds"])
    rows = [r for p in result.parquet_files for r in pq.read_table(p).to_pylist()]
    assert sorted(r["row_id"] for r in rows) == [f"r{i}" for i in range(7)]
    assert summary.drafts == sum(r["spec_steps"] for r in rows) > 0
    assert summary.accepted_tokens == sum(r["accepted_tokens"] for r in rows)
    assert summary.output_tokens == sum(r["completion_tokens"] for r in rows) == 2 * 7
    assert summary.concurrency == 1
    # Killed launches' figures are their requests' own; the last launch's are its engine's counters.
    assert summary.counters_scope == "engine+requests"


@pytest.mark.parametrize("damage", ["missing", "half-written"])
def test_a_damaged_shard_summary_is_shown_refused_by_merge_and_rebuilt_by_the_rerun(make_job, damage: str) -> None:
    job = make_job()
    first = run_job(job, engine=fake_engine(job))
    root, stats = first.folder.root, first.folder.stats_path
    if damage == "missing":
        stats.unlink()
    else:
        stats.write_text(stats.read_text()[:40])
    expected = "missing" if damage == "missing" else "damaged (JSONDecodeError)"
    [state] = run_status(root)
    assert (state.state, state.problem) == ("damaged", f"stats/shard-00000-of-00001.json is {expected}")
    status = subprocess.run([sys.executable, str(STATUS), str(root)], capture_output=True, text=True, timeout=120)
    assert status.returncode == 1 and f"stats/shard-00000-of-00001.json is {expected}" in status.stderr
    with pytest.raises(RunIncompleteError, match=r"1 of 1 shards are not done: 0 \(stats/shard-00000-of-00001.json"):
        merge_run(root)
    # The rerun generates nothing (the parts are whole) and adds the summary up from them again.
    engine = fake_engine(job)
    again = run_job(job, engine=engine)
    assert not again.generated and not engine.added
    assert again.summary.rows == first.summary.rows and again.summary.output_tokens == first.summary.output_tokens
    assert run_status(root)[0].state == "done" and merge_run(root).summary.rows == first.summary.rows
