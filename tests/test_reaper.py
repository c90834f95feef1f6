"""The reaper with plain processes (no engine): what a killed job leaves is ended, nothing else is touched."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from conftest import PROJECT_ROOT

SHM = Path("/dev/shm")

# A stand-in for the job: starts the reaper, then a child that holds two /dev/shm files open (one older than the
# reaper, one created after), optionally stops the reaper the normal way, prints the child's pid and waits. A forked
# child (what vLLM does on GPUs) inherits the job's end of the reaper's pipe, so the pipe stays open after the kill.
JOB = textwrap.dedent(
    """
    import os, subprocess, sys, time
    from specbatch.reaper import Reaper

    older, newer, mode = sys.argv[1:4]
    reaper = Reaper.start()
    if mode == "fork":
        reader, writer = os.pipe()
        child_pid = os.fork()
        if child_pid == 0:
            a, b = open(older), open(newer, "w")
            os.write(writer, b"open")
            time.sleep(600)
            os._exit(0)
        assert os.read(reader, 4) == b"open"
    else:
        child = subprocess.Popen([sys.executable, "-c", (
            "import sys, time; a = open(sys.argv[1]); b = open(sys.argv[2], 'w'); print('open', flush=True); "
            "time.sleep(600)"), older, newer], stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline() == "open\\n"
        child_pid = child.pid
    time.sleep(1.5)  # the reaper records every 0.5 s
    if mode == "stop":
        reaper.stop()
    print(child_pid, reaper.process.pid, flush=True)
    time.sleep(600)
    """
)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture
def shm_files() -> Iterator[tuple[Path, Path]]:
    tag = uuid.uuid4().hex
    older, newer = SHM / f"specbatch-test-{tag}-older", SHM / f"specbatch-test-{tag}-newer"
    older.write_text("made before the reaper started")
    yield older, newer
    older.unlink(missing_ok=True)
    newer.unlink(missing_ok=True)


def _start_job(tmp_path: Path, older: Path, newer: Path, mode: str) -> tuple[subprocess.Popen[str], int, int]:
    script = tmp_path / "job.py"
    script.write_text(JOB)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PROJECT_ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    job = subprocess.Popen(
        [sys.executable, str(script), str(older), str(newer), mode],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    assert job.stdout is not None
    child_pid, reaper_pid = (int(word) for word in job.stdout.readline().split())
    return job, child_pid, reaper_pid


def _kill_all(job: subprocess.Popen[str], *pids: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(job.pid, signal.SIGKILL)
    job.wait()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize(("kill", "child"), [("job", "spawn"), ("job", "fork"), ("group", "spawn")])
def test_killed_job_leaves_nothing_it_started(
    tmp_path: Path, shm_files: tuple[Path, Path], kill: str, child: str
) -> None:
    """kill -9 of the job alone, or of its whole process group (then the reaper, in its own session, still removes
    the shared memory of the processes killed with the job)."""
    older, newer = shm_files
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # not the job's
    job, child_pid, reaper_pid = _start_job(tmp_path, older, newer, child)
    try:
        if kill == "job":
            job.send_signal(signal.SIGKILL)
        else:
            os.killpg(job.pid, signal.SIGKILL)
        job.wait()
        deadline = time.monotonic() + 10
        while (_alive(child_pid) or _alive(reaper_pid) or newer.exists()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(child_pid), "the job's child outlived it"
        assert not newer.exists(), "the segment the job's child created was left"
        assert not _alive(reaper_pid), "the reaper outlived its work"
        assert older.exists(), "a file older than the reaper was removed"
        assert bystander.poll() is None, "a process that is not the job's was ended"
    finally:
        bystander.kill()
        bystander.wait()
        _kill_all(job, child_pid, reaper_pid)


def test_stopped_reaper_ends_nothing(tmp_path: Path, shm_files: tuple[Path, Path]) -> None:
    older, newer = shm_files
    job, child_pid, reaper_pid = _start_job(tmp_path, older, newer, "stop")
    try:
        assert not _alive(reaper_pid), "reaper.stop() returned before the reaper exited"
        job.send_signal(signal.SIGKILL)
        job.wait()
        time.sleep(2)
        assert _alive(child_pid) and newer.exists()
    finally:
        _kill_all(job, child_pid, reaper_pid)
