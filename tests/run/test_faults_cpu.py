"""Faults with real processes and a real vLLM engine: a full disk while writing a chunk, and SIGTERM/SIGINT (what
Slurm, `timeout` and Ctrl-C send) in the middle of a chunk, to the job's process group or to every process it has.
Nothing finished is lost, nothing half-written is left, the MLflow run says what happened, and rerunning the same
command finishes the shard."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest
from mlflow.tracking import MlflowClient

from conftest import PROJECT_ROOT, LiveJob, assert_one_line_stop, compose_job, run_generate
from specbatch.common.interrupts import EXIT_INTERRUPTED, EXIT_STOPPED
from specbatch.run.folder import RunFolder

pytestmark = pytest.mark.slow
INJECT = PROJECT_ROOT / "tests" / "inject_enospc.py"
# Slurm's default KillWait: SIGKILL follows SIGTERM after this many seconds.
KILL_WAIT = 30.0


def args_for(tmp_path: Path, experiment: str, rows: int, chunk: int, *extra: str) -> list[str]:
    return [
        "spec=ngram",
        f"max_samples={rows}",
        f"chunk_size={chunk}",
        "sampling.max_tokens=32",
        "model.dtype=float32",
        f"output_root={tmp_path}",
        f"tracking.experiment={experiment}",
        *extra,
    ]


# No warm-up request (~2 s of a job) where nothing waits on the first steps' speed: no timing figure is read. The
# group-signal launches keep it: warm-up compiles n-gram's matcher (numba), which a first step would otherwise do
# while the chunks in flight must finish within the stop's grace (and the full disk before them, in the same run
# folder, has it too: engine.warmup is part of the run's identity).
NO_WARMUP = "engine.warmup=false"


def mlflow_statuses(tmp_path: Path, experiment: str) -> list[str]:
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id], order_by=["start_time"])
    return [r.info.status for r in runs]


def all_row_ids(layout: RunFolder) -> list[str]:
    return [r for p in sorted(layout.data_dir.glob("part-*.parquet")) for r in pq.read_table(p)["row_id"].to_pylist()]


def parts(layout: RunFolder) -> int:
    return len(list(layout.data_dir.glob("part-*.parquet")))


def test_a_full_disk_then_sigterm_to_the_group_then_ctrl_c_past_the_grace_keep_whole_chunks_for_one_rerun(
    tmp_path: Path,
) -> None:
    # One run folder takes three faults in turn, each asserted, then one rerun finishes it. Two requests at once, four
    # queued: in each launch two chunks are in the engine when the stream starts and the rest are not. Five chunks:
    # the full disk keeps one, the SIGTERM launch writes at most its two in flight, so the Ctrl-C launch still has
    # two to feed. (stop_grace_seconds is in no identity: the Ctrl-C launch resumes the same run.)
    args = [*args_for(tmp_path, "faults", rows=10, chunk=2), "engine.max_num_seqs=2"]
    layout = RunFolder.for_job(compose_job(args))

    # A full disk while writing the second chunk.
    failed = subprocess.run(
        [sys.executable, str(INJECT), *args],
        cwd=PROJECT_ROOT,
        env={**os.environ, "INJECT_ENOSPC_ON_WRITE": "2"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    out = failed.stdout + failed.stderr
    assert failed.returncode == 1, out[-3000:]
    assert "No space left on device" in out and "rerun the same command" in out and "Traceback" not in out
    # The chunk written first is kept, the second left nothing behind (no half part, no temporary file). Which of
    # the two finishes first is the engine's business (a streaming job promises no order), so either may survive.
    [kept] = [p.name for p in layout.data_dir.iterdir()]
    assert kept in ("part-00000.parquet", "part-00001.parquet")
    assert not layout.done_marker.exists()
    assert mlflow_statuses(tmp_path, "faults") == ["FAILED"]

    # `timeout`, systemd and `kill -TERM -- -<pgid>` signal the whole group: the chunks in flight are finished.
    job = LiveJob.generate(args)
    job.wait_for("engine fed: 4 requests from 2 chunks", timeout=600)
    job.signal_group(signal.SIGTERM)
    signalled = time.monotonic()
    assert job.wait(timeout=600) == EXIT_STOPPED, job.output[-3000:]
    assert time.monotonic() - signalled < KILL_WAIT, "Slurm would have sent SIGKILL by now"
    assert "5 chunks, 4 to generate" in job.output, job.output[-3000:]  # the full disk's kept chunk is not redone
    stopped = re.search(r"stopped by SIGTERM after (\d) of 4 chunks", job.output)
    assert stopped, job.output[-3000:]
    assert_one_line_stop(job.output)
    written = int(stopped.group(1))
    # The chunks in flight were finished and written; nothing after them was started; no done marker.
    assert written >= 1 and parts(layout) == 1 + written
    assert not list(layout.data_dir.glob(".*tmp*")) and not layout.done_marker.exists()
    assert mlflow_statuses(tmp_path, "faults") == ["FAILED", "KILLED"]

    # SIGINT to the group is Ctrl-C in a terminal. With no grace at all, the chunks in flight are abandoned:
    # nothing of theirs is written, and the rerun generates them.
    ctrl_c_args = [*args, "stop_grace_seconds=0"]
    job = LiveJob.generate(ctrl_c_args)
    job.wait_for("engine fed: 4 requests from 2 chunks", timeout=600)
    job.signal_group(signal.SIGINT)
    assert job.wait(timeout=600) == EXIT_INTERRUPTED, job.output[-3000:]
    assert f"5 chunks, {4 - written} to generate" in job.output, job.output[-3000:]
    assert "stopped by SIGINT (not finished within stop_grace_seconds=0)" in job.output, job.output[-3000:]
    assert_one_line_stop(job.output)
    before = 1 + written
    assert parts(layout) - before < 2 and not list(layout.data_dir.glob(".*tmp*")) and not layout.done_marker.exists()
    assert mlflow_statuses(tmp_path, "faults") == ["FAILED", "KILLED", "KILLED"]

    done = parts(layout)
    again = run_generate(ctrl_c_args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"5 chunks, {5 - done} to generate" in again.stdout + again.stderr
    # Every row exactly once: what each fault kept, and what the rerun generated.
    assert sorted(all_row_ids(layout)) == sorted(f"HumanEval/{i}" for i in range(10))
    assert layout.done_marker.exists()
    assert mlflow_statuses(tmp_path, "faults") == ["FAILED", "KILLED", "KILLED", "FINISHED"]


def test_sigterm_to_every_process_of_a_multiprocess_engine_stops_within_slurms_kill_wait(tmp_path: Path) -> None:
    # What Slurm does at a time limit: SIGTERM to the job and to vLLM's engine processes alike (they shut down on
    # it at once). The job stops in one line, keeps only whole chunks, and nothing it started outlives it.
    args = [*args_for(tmp_path, "slurm-stop", 6, 2, NO_WARMUP), "engine.max_num_seqs=2", "engine.multiprocessing=true"]
    layout = RunFolder.for_job(compose_job(args))
    job = LiveJob.generate(args)
    job.wait_for("engine fed: 4 requests from 2 chunks", timeout=600)
    pids = job.signal_every_process(signal.SIGTERM)
    assert len(pids) >= 2, "the engine core runs in a process of its own"
    signalled = time.monotonic()
    assert job.wait(timeout=600) == EXIT_STOPPED, job.output[-3000:]
    assert time.monotonic() - signalled < KILL_WAIT, "Slurm would have sent SIGKILL by now"
    assert re.search(r"stopped by SIGTERM", job.output), job.output[-3000:]
    assert_one_line_stop(job.output)
    parts = list(layout.data_dir.glob("part-*.parquet"))
    assert all(pq.read_table(p).num_rows == 2 for p in parts), "only whole chunks are written"
    assert not list(layout.data_dir.glob(".*tmp*")) and not layout.done_marker.exists()
    assert mlflow_statuses(tmp_path, "slurm-stop") == ["KILLED"]
    deadline = time.monotonic() + 15
    while any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in pids):
        assert time.monotonic() < deadline, "a process of the job outlived it"
        time.sleep(0.2)
