"""Kills and races with real processes on the embedded model: a kill followed by an edit of the data file, two
launches with different shard counts at the same moment, and a launch racing the end of another."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from mlflow.tracking import MlflowClient

from conftest import LiveJob, compose_job, kill_job_group_when, run_generate
from specbatch.run.folder import RunFolder

pytestmark = pytest.mark.slow


def write_rows(path: Path, ids: list[str], text: str) -> None:
    path.write_text("".join(json.dumps({"id": i, "q": f"{text} {i}"}) + "\n" for i in ids))


def local_args(tmp_path: Path, data: Path, *extra: str) -> list[str]:
    return [
        f"output_root={tmp_path / 'out'}",
        "spec=none",
        "dataset=local",
        f"dataset.path={data}",
        "dataset.template='Repeat after me: {q}'",
        "dataset.id_column=id",
        "sampling.max_tokens=24",
        "model.dtype=float32",
        *extra,
    ]


def row_ids(layout: RunFolder) -> list[str]:
    return [r for p in sorted(layout.data_dir.glob("part-*.parquet")) for r in pq.read_table(p)["row_id"].to_pylist()]


def statuses(tmp_path: Path, experiment: str) -> list[str]:
    client = MlflowClient(f"sqlite:///{tmp_path / 'out'}/mlflow.db")
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return []
    return [r.info.status for r in client.search_runs([found.experiment_id], order_by=["start_time"])]


def test_a_kill_then_an_edited_data_file_is_refused_and_the_killed_run_ends_killed(tmp_path: Path) -> None:
    data = tmp_path / "q.jsonl"
    # Two requests in flight, so the chunks finish one after another (with every row in flight, all chunks finished
    # in the job's last 2 s) and the job still runs once chunk 0 and its MLflow run (started on its own thread once
    # the engine is built, so it may come just after chunk 0) are both there: the kill waits for both. The run is
    # seen through the job's own record of it, not the store: a client opening the store while the job creates its
    # tables runs the same migrations at the same time ("table trace_info already exists"). No warm-up request (~2 s
    # of each of the two launches that start vLLM): no timing is read, and a slower first chunk only gives the
    # MLflow run more time to come first (measured without it: 0.8 s before chunk 0, the kill leaving 7 of 8 chunks).
    original = [f"q{i}" for i in range(16)]
    write_rows(data, original, "the quick brown fox number")
    args = local_args(
        tmp_path, data, "chunk_size=2", "engine.max_num_seqs=2", "engine.warmup=false", "tracking.experiment=edited"
    )
    layout = RunFolder.for_job(compose_job(args))
    kill_job_group_when(
        args,
        lambda: layout.part_path(0).exists() and layout.mlflow_active_path.exists(),
        "chunk 0 with its MLflow run",
    )
    assert statuses(tmp_path, "edited") == ["RUNNING"]  # a SIGKILL ends nothing by itself
    written = row_ids(layout)
    assert written[:2] == ["q0", "q1"] and not layout.done_marker.exists()

    write_rows(data, list(reversed(original)), "an edited question")
    refused = run_generate(args)
    out = refused.stdout + refused.stderr
    assert refused.returncode == 2, out[-3000:]
    assert f"dataset.path={data} changed since shard 0/1" in out and "run_name=" in out and "Traceback" not in out
    assert "starting vLLM" not in out
    assert row_ids(layout) == written  # nothing generated over the edited file
    assert statuses(tmp_path, "edited") == ["KILLED"]  # the rerun ended the killed launch's run

    write_rows(data, original, "the quick brown fox number")
    finished = run_generate(args)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert row_ids(layout) == original and layout.done_marker.exists()
    assert statuses(tmp_path, "edited") == ["KILLED", "FINISHED"]


def test_two_launches_with_different_shard_counts_at_the_same_moment(tmp_path: Path) -> None:
    data = tmp_path / "q.jsonl"
    write_rows(data, [f"q{i}" for i in range(6)], "question")
    # No warm-up request: no timing is read, and it is ~2 s of the winner's engine start.
    common = local_args(tmp_path, data, "tracking=off", "engine.warmup=false", "shard.index=0")
    jobs = {count: LiveJob.generate([*common, f"shard.count={count}"]) for count in (2, 3)}
    codes = {count: job.wait(timeout=900) for count, job in jobs.items()}
    assert sorted(codes.values()) == [0, 2], {c: j.output[-2000:] for c, j in jobs.items()}
    winner = next(c for c, code in codes.items() if code == 0)
    loser = next(c for c in codes if c != winner)
    assert f"this run was started with shard.count={winner}" in jobs[loser].output
    assert "starting vLLM" not in jobs[loser].output
    root = RunFolder.for_job(compose_job([*common, f"shard.count={winner}"])).root
    assert json.loads((root / "run.json").read_text())["shard_count"] == winner
    # Only the winner's shard wrote data; no row twice.
    assert sorted(p.name for p in (root / "data").iterdir()) == [f"shard-00000-of-0000{winner}"]
    ids = row_ids(RunFolder(root, 0, winner))
    assert len(ids) == len(set(ids)) == 6 // winner


def test_a_launch_racing_the_end_of_another_reports_it_and_overwrites_nothing(tmp_path: Path) -> None:
    data = tmp_path / "q.jsonl"
    write_rows(data, [f"q{i}" for i in range(6)], "tell me about the number")
    args = local_args(tmp_path, data, "chunk_size=2", "tracking.experiment=ending")
    layout = RunFolder.for_job(compose_job(args))
    # The second launch starts once the first, holding the shard's lock, starts its engine: the engine's start, its
    # warm-up request and the generation are the time the second one has to reach its first look before the first
    # finishes. (Started at "engine ready", with only the last two, it came too late beside a busy neighbour.)
    first = LiveJob.generate(args)
    second = None
    try:
        first.wait_for("starting vLLM", timeout=600)
        second = LiveJob.generate(args)
        # The second launch has taken its first look (no done marker yet) and read the data; it is held there
        # until the first one has finished, as a slow start on a busy node would.
        second.wait_for("dataset local: 6 rows", timeout=300)
        second.process.send_signal(signal.SIGSTOP)
        assert not layout.done_marker.exists(), "the first launch finished too early for the race"
        assert first.wait(timeout=600) == 0, first.output[-3000:]
        stats = layout.stats_path.read_text()
        assert json.loads(stats)["engine_startup_seconds"] > 0
        second.process.send_signal(signal.SIGCONT)
        assert second.wait(timeout=300) == 0, second.output[-3000:]
    finally:
        for job in (first, second):
            if job and job.process.poll() is None:
                job.process.send_signal(signal.SIGCONT)
                job.process.kill()
    assert "was finished by another process meanwhile" in second.output
    assert "starting vLLM" not in second.output
    assert layout.stats_path.read_text() == stats
    assert statuses(tmp_path, "ending") == ["FINISHED"]
