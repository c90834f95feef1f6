"""`kill -9` of the job's main process alone (as the OOM killer or a user does, unlike a node loss that takes the
whole process group): none of the engine's processes or /dev/shm segments may outlive the job by more than a few
seconds, and a job that finishes normally leaves nothing running."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

import psutil
import pytest

from conftest import GENERATE, PROJECT_ROOT, LiveJob, compose_job, run_generate
from specbatch.run.folder import RunFolder
from specbatch.serving import reaper
from specbatch.serving.reaper import IPC_PREFIX

pytestmark = pytest.mark.slow

# How long anything of the killed job may survive it (the engine's own shutdown takes ~1-3 s).
SURVIVAL_LIMIT_SECONDS = 10.0
# Inherited by every process the job starts, so the test finds them even if the job lost track of them.
TAG_VARIABLE = "SPECBATCH_TEST_ORPHANS_TAG"
SHM = Path("/dev/shm")


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _describe(processes: Iterable[psutil.Process]) -> list[str]:
    described = []
    for process in processes:
        with contextlib.suppress(psutil.Error):
            described.append(f"{process.pid} {process.name()} rss={process.memory_info().rss / 2**20:.0f} MiB")
    return described


def _tagged(tag: str) -> list[psutil.Process]:
    """Live processes whose environment carries the tag: this test's job and everything it started."""
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if process.environ().get(TAG_VARIABLE) == tag and _alive(process):
                found.append(process)
    return found


def _shm_entries() -> set[tuple[str, int]]:
    return {(entry.path, entry.inode()) for entry in os.scandir(SHM)}


def _ipc_dirs() -> set[str]:
    """The engines' own folders, and the rendezvous files of torch process groups vLLM leaves in the temp folder."""
    tmp = Path(tempfile.gettempdir())
    return {str(p) for pattern in (f"{IPC_PREFIX}*", "vllm_dist_*") for p in tmp.glob(pattern)}


def shm_used_by(processes: Iterable[psutil.Process]) -> set[str]:
    paths = set()
    for process in processes:
        with contextlib.suppress(psutil.Error):
            paths.update(m.path for m in process.memory_maps() if m.path.startswith(f"{SHM}/"))
            paths.update(f.path for f in process.open_files() if f.path.startswith(f"{SHM}/"))
    return paths


def test_sigkill_of_the_job_leaves_no_engine_process_or_shm(tmp_path: Path) -> None:
    tag = uuid.uuid4().hex
    args = [f"output_root={tmp_path}", "max_samples=8", "chunk_size=2", "sampling.max_tokens=48", "tracking=off"]
    # Engine core and worker in processes of their own (vLLM's default, and on a GPU ours): the case that can leave
    # them behind. Without a GPU the job runs them in its own process, which a kill -9 ends with it.
    args += ["model.dtype=float32", "engine.multiprocessing=true"]
    # No warm-up request: it only keeps one-off costs out of the timings, which nothing here reads; the engine's
    # processes and ring buffers are there from its start, before any request.
    args += ["engine.warmup=false"]
    layout = RunFolder.for_job(compose_job(args))
    shm_before = _shm_entries()
    ipc_before = _ipc_dirs()
    job_shm: set[str] = set()
    with (tmp_path / "job.log").open("w") as log_file:
        # Its own session only so the finally below can clean up whatever the fix fails to end.
        proc = subprocess.Popen(
            [sys.executable, str(GENERATE), *args],
            cwd=PROJECT_ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", TAG_VARIABLE: tag},
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 600
        while not layout.part_path(0).exists():  # engine up, first chunk written, the next one in flight
            assert proc.poll() is None, (tmp_path / "job.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no first chunk within 10 minutes"
            time.sleep(0.2)
        descendants = psutil.Process(proc.pid).children(recursive=True)
        assert "VLLM::EngineCore" in [p.name() for p in descendants], _describe(descendants)
        # Segments that appeared since the start and that the job's processes use: the engine's ring buffers.
        new_shm = {path for path, inode in _shm_entries() - shm_before}
        job_shm = new_shm & shm_used_by(descendants)
        assert job_shm, f"no /dev/shm segment of the engine found (new: {sorted(new_shm)})"

        proc.send_signal(signal.SIGKILL)  # the main process only
        proc.wait()
        killed_at = time.monotonic()
        while True:
            survivors = [p for p in descendants if _alive(p)]
            shm_left = sorted(path for path in job_shm if os.path.exists(path))
            if not survivors and not shm_left:
                break
            assert time.monotonic() - killed_at < SURVIVAL_LIMIT_SECONDS, (
                f"{SURVIVAL_LIMIT_SECONDS:.0f} s after kill -9 of the job: still alive {_describe(survivors)}, "
                f"/dev/shm left {shm_left}"
            )
            time.sleep(0.2)
        assert not _tagged(tag), _describe(_tagged(tag))
        # vLLM's IPC sockets and its workers' rendezvous file went into a folder of the engine's own, which the
        # reaper removed with it.
        assert not _ipc_dirs() - ipc_before, sorted(_ipc_dirs() - ipc_before)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        for process in _tagged(tag):  # anything that left the session (none should)
            with contextlib.suppress(psutil.Error):
                process.kill()
        for path in job_shm:  # what a SIGKILLed engine cannot remove itself (only if the test failed)
            Path(path).unlink(missing_ok=True)

    # The rerun finishes the shard and, once it has exited, nothing it started is still running.
    result = run_generate(args, env={TAG_VARIABLE: tag})
    assert result.returncode == 0, result.stderr[-3000:]
    assert layout.done_marker.is_file()
    assert "specbatch.serving.reaper" not in result.stderr, (
        "the engine was closed normally: the reaper had nothing to end"
    )
    deadline = time.monotonic() + 5
    while _tagged(tag) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _tagged(tag), _describe(_tagged(tag))
    assert not _ipc_dirs() - ipc_before, "a normal stop removes the engine's IPC folder"
    assert "resource_tracker" not in result.stderr, "a normal stop prints no leaked-resource warning"


def test_an_engine_in_the_jobs_process_leaves_no_rendezvous_file_after_a_stop_or_a_kill(tmp_path: Path) -> None:
    """vLLM's CPU default runs the engine in the job's process, where no reaper watches: its torch rendezvous file
    (vllm_dist_<hex>, which a clean close removes) goes into a folder of the engine's own. A SIGTERM during the start
    removes it at once; a kill -9 leaves it, and the next launch removes it. Another process's files stay: a bare
    rendezvous file, and the folder of a job still running (this test's process)."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {"TMPDIR": str(temp)}
    args = [f"output_root={tmp_path / 'out'}", "max_samples=2", "sampling.max_tokens=8", "tracking=off"]
    args += ["engine.warmup=false"]
    foreign = temp / f"vllm_dist_{uuid.uuid4().hex}"
    foreign.write_text("")
    running = temp / f"{IPC_PREFIX}{reaper._host()}-{os.getpid()}-running0"
    running.mkdir()
    (running / "vllm_dist_running").write_text("")
    planted = {foreign, running / "vllm_dist_running"}

    def rendezvous() -> list[Path]:
        return sorted(set(temp.rglob("vllm_dist_*")) - planted)

    started: list[LiveJob] = []

    def start_until_rendezvous() -> LiveJob:
        job = LiveJob.generate(args, env=env)
        started.append(job)
        deadline = time.monotonic() + 600
        while not rendezvous():
            assert job.process.poll() is None, job.output[-3000:]
            assert time.monotonic() < deadline, "no rendezvous file within 10 minutes"
            time.sleep(0.05)
        return job

    try:
        job = start_until_rendezvous()
        (made,) = rendezvous()
        assert made.parent.name.startswith(f"{IPC_PREFIX}{reaper._host()}-{job.process.pid}-"), made
        job.signal_group(signal.SIGTERM)
        assert job.wait(timeout=300) != 0, job.output[-3000:]
        assert rendezvous() == [], "a stop during the engine's start removes its folder"

        job = start_until_rendezvous()
        job.process.send_signal(signal.SIGKILL)
        job.wait(timeout=60)
        (left,) = rendezvous()
        assert left.parent.name.startswith(f"{IPC_PREFIX}{reaper._host()}-{job.process.pid}-"), left
    finally:
        for each in started:  # a job left running by a failed assertion
            with contextlib.suppress(ProcessLookupError):
                os.killpg(each.process.pid, signal.SIGKILL)
            each.process.wait()

    result = run_generate(args, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"removed {left.parent}, left by the engine of a job that is gone" in result.stdout + result.stderr
    assert rendezvous() == [] and sorted(temp.glob(f"{IPC_PREFIX}*")) == [running]
    assert foreign.exists() and (running / "vllm_dist_running").exists()
