"""launcher=ray with the local Ray the job starts itself (no RAY_ADDRESS): a SIGTERM while Ray starts or while chunks
run ends the job with its own line (exit 143) and no traceback, no second Ray and no session folder left behind; its
processes run at the job's niceness; a replica the machine cannot hold is refused, and replicas beyond what it holds
are not promised. Each job is jobs/generate.py as a user runs it, with RAY_TMPDIR a folder of the test's own, so
whatever Ray leaves (a session folder, a second Ray's) is found there."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from tests.cluster.test_ray_cpu import JOB_BOUND, _data, _dummy_args, _parts, _wait
from tests.conftest import GENERATE, PROJECT_ROOT

pytestmark = pytest.mark.slow


@pytest.fixture
def ray_tmp() -> Iterator[Path]:
    """RAY_TMPDIR of the test's jobs: short (Ray's socket paths must fit in 107 bytes), empty when they are done."""
    folder = Path(tempfile.mkdtemp(prefix="sbl-", dir="/tmp"))
    try:
        yield folder
    finally:
        subprocess.run(["rm", "-rf", str(folder)], check=False)


def _start(args: list[str], log: Path, ray_tmp: Path, nice: int = 0) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env |= {"PYTHONUNBUFFERED": "1", "RAY_TMPDIR": str(ray_tmp), "RAY_USAGE_STATS_ENABLED": "0"}
    with log.open("w") as sink:
        return subprocess.Popen(
            ["nice", "-n", str(nice), sys.executable, str(GENERATE), *args],
            cwd=PROJECT_ROOT,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _end(job: subprocess.Popen) -> None:
    """Kill what is left of a job the test did not see end (its whole session: Ray's processes are in it)."""
    if job.poll() is None:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(timeout=60)


def _sessions(ray_tmp: Path) -> list[Path]:
    return list(ray_tmp.glob("**/session_2*"))


def _said_a_stop_in_one_line(log: Path) -> str:
    said = log.read_text()
    assert "stopped by SIGTERM" in said, said[-3000:]
    assert "Traceback" not in said and "Ray is not initialized" not in said, said[-6000:]
    return said


def test_a_sigterm_while_ray_starts_is_the_jobs_stop(tmp_path: Path, ray_tmp: Path) -> None:
    out = tmp_path / "out"
    job = _start(_dummy_args(out, _data(tmp_path, 20), "chunk_size=10"), tmp_path / "job.log", ray_tmp)
    try:
        # Ray writes its session folder while ray.init runs, its own SIGTERM handler already set.
        _wait(lambda: _sessions(ray_tmp), "local Ray's session folder", proc=job)
        job.send_signal(signal.SIGTERM)
        assert job.wait(timeout=JOB_BOUND) == 143, (tmp_path / "job.log").read_text()[-4000:]
    finally:
        _end(job)
    _said_a_stop_in_one_line(tmp_path / "job.log")
    _wait(lambda: not any(ray_tmp.iterdir()), "removal of the job's Ray folder", bound=60)


def test_a_stopped_driver_abandons_its_chunks_without_a_traceback_or_a_second_ray(
    tmp_path: Path, ray_tmp: Path
) -> None:
    out = tmp_path / "out"
    args = _dummy_args(out, _data(tmp_path, 200), "chunk_size=10", "engine.step_seconds=0.1")
    job = _start(args, tmp_path / "job.log", ray_tmp)
    try:
        _wait(lambda: _parts(out), "part written", proc=job)
        job.send_signal(signal.SIGTERM)
        assert job.wait(timeout=JOB_BOUND) == 143, (tmp_path / "job.log").read_text()[-4000:]
    finally:
        _end(job)
    said = _said_a_stop_in_one_line(tmp_path / "job.log")
    # What Ray really does with the chunks in flight, not a grace it does not give them.
    assert "the chunks in flight on the Ray replicas are abandoned" in said
    assert "finishing the chunks in flight" not in said
    assert 0 < len(_parts(out)) < 20
    # No session folder left, and none of a second Ray (started by a late call after ray.shutdown()).
    _wait(lambda: not any(ray_tmp.iterdir()), "removal of the job's Ray folder", bound=60)


def test_a_local_ray_runs_at_the_jobs_niceness_holds_the_replicas_it_says_and_goes_with_a_killed_job(
    tmp_path: Path, ray_tmp: Path
) -> None:
    out = tmp_path / "out"
    args = _dummy_args(out, _data(tmp_path, 200), "chunk_size=10", "ray.replicas=50", "engine.step_seconds=0.1")
    job = _start(args, tmp_path / "job.log", ray_tmp, nice=5)
    try:
        _wait(lambda: _parts(out), "part written", proc=job)
        # The driver's Ray: its GCS and raylet (the driver's children) and their workers, the replicas among them.
        procs = [p for p in psutil.Process(job.pid).children(recursive=True) if p.is_running()]
        names = {p.name(): p.nice() for p in procs}
        assert "raylet" in names and any("MapWorker" in name for name in names), names
        assert set(names.values()) == {5}, names
        # A kill -9 of the driver alone: its reaper ends the local Ray it started and removes its session folder.
        os.kill(job.pid, signal.SIGKILL)
        job.wait(timeout=60)
        _wait(lambda: not [p for p in procs if p.is_running()], "the killed job's Ray processes to end", bound=60)
        _wait(lambda: not any(ray_tmp.iterdir()), "removal of the killed job's Ray folder", bound=60)
    finally:
        _end(job)
    said = (tmp_path / "job.log").read_text()
    running = re.search(r"ray.replicas=50 but the local Ray .* running (\d+)", said)
    assert running and int(running[1]) < 50, said[-4000:]
    assert f"to {running[1]} engine replica(s)" in said
    assert 0 < len(_parts(out)) < 20


def test_a_replica_the_local_ray_can_never_place_is_refused_in_one_line(tmp_path: Path, ray_tmp: Path) -> None:
    out = tmp_path / "out"
    args = _dummy_args(out, _data(tmp_path, 10), "ray.cpus_per_replica=4096")
    job = _start(args, tmp_path / "job.log", ray_tmp)
    try:
        assert job.wait(timeout=JOB_BOUND) == 2, (tmp_path / "job.log").read_text()[-4000:]
    finally:
        _end(job)
    errors = [line for line in (tmp_path / "job.log").read_text().splitlines() if "[ERROR]" in line]
    assert len(errors) == 1 and "ray.cpus_per_replica=4096 is more than the" in errors[0], errors
    _wait(lambda: not any(ray_tmp.iterdir()), "removal of the job's Ray folder", bound=60)
