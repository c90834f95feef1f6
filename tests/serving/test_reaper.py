"""The reaper with plain processes (no engine): what a killed job leaves is ended, nothing else is touched."""

from __future__ import annotations

import contextlib
import mmap
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from conftest import PROJECT_ROOT
from specbatch.serving import reaper

SHM = Path("/dev/shm")

# A stand-in for the job: starts the reaper, then a child that holds two /dev/shm files open (one older than the
# reaper, one created after) and makes a loky-style semaphore file named by its pid (closed at once, as vLLM's
# EngineCore maps one without holding it open), optionally stops the reaper the normal way, prints the child's pid
# and waits. A forked child (what vLLM does on GPUs) inherits the job's end of the reaper's pipe, so the pipe stays
# open after the kill.
JOB = textwrap.dedent(
    """
    import os, subprocess, sys, time
    from specbatch.serving.reaper import Reaper

    older, newer, mode = sys.argv[1:4]
    reaper = Reaper.start()
    if mode == "fork":
        reader, writer = os.pipe()
        child_pid = os.fork()
        if child_pid == 0:
            a, b = open(older), open(newer, "w")
            open(f"/dev/shm/sem.loky-{os.getpid()}-specbatchtest", "w").close()
            os.write(writer, b"open")
            time.sleep(600)
            os._exit(0)
        assert os.read(reader, 4) == b"open"
    else:
        child = subprocess.Popen([sys.executable, "-c", (
            "import os, sys, time; a = open(sys.argv[1]); b = open(sys.argv[2], 'w'); "
            "open(f'/dev/shm/sem.loky-{os.getpid()}-specbatchtest', 'w').close(); print('open', flush=True); "
            "time.sleep(600)"), older, newer], stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline() == "open\\n"
        child_pid = child.pid
    time.sleep(1.5)  # the reaper records every 0.5 s
    if mode == "stop-after-exit":  # the engine's process exits the normal way, without unlinking its semaphore
        child.terminate()
        child.wait()
    if mode == "stop-after-crash":  # it dies without any clean-up, as a crashed server does
        child.kill()
        child.wait()
    if mode.startswith("stop"):
        reaper.stop(crashed=mode == "stop-after-crash")
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


class Job:
    """The stand-in job in its own session; ``kill_all`` ends it, its child and its reaper whatever the test did."""

    def __init__(self, tmp_path: Path, older: Path, newer: Path, mode: str) -> None:
        script = tmp_path / "job.py"
        script.write_text(JOB)
        src = str(PROJECT_ROOT / "src")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
        self.process = subprocess.Popen(
            [sys.executable, str(script), str(older), str(newer), mode],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=True,
        )
        self.child_pid = self.reaper_pid = 0

    def wait_started(self) -> None:
        assert self.process.stdout is not None
        self.child_pid, self.reaper_pid = (int(word) for word in self.process.stdout.readline().split())

    def kill_all(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        for pid in (self.child_pid, self.reaper_pid):
            if pid:
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
    job = Job(tmp_path, older, newer, child)
    try:
        job.wait_started()
        child_pid, reaper_pid = job.child_pid, job.reaper_pid
        semaphore = SHM / f"sem.loky-{child_pid}-specbatchtest"
        assert semaphore.exists()
        if kill == "job":
            job.process.send_signal(signal.SIGKILL)
        else:
            os.killpg(job.process.pid, signal.SIGKILL)
        job.process.wait()
        deadline = time.monotonic() + 10
        while (_alive(child_pid) or _alive(reaper_pid) or newer.exists()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(child_pid), "the job's child outlived it"
        assert not newer.exists(), "the segment the job's child created was left"
        assert not semaphore.exists(), "the semaphore named by the job's child was left"
        assert not _alive(reaper_pid), "the reaper outlived its work"
        assert older.exists(), "a file older than the reaper was removed"
        assert bystander.poll() is None, "a process that is not the job's was ended"
    finally:
        bystander.kill()
        bystander.wait()
        job.kill_all()
        if job.child_pid:
            (SHM / f"sem.loky-{job.child_pid}-specbatchtest").unlink(missing_ok=True)


def test_stopped_reaper_ends_nothing(tmp_path: Path, shm_files: tuple[Path, Path]) -> None:
    older, newer = shm_files
    job = Job(tmp_path, older, newer, "stop")
    try:
        job.wait_started()
        assert not _alive(job.reaper_pid), "reaper.stop() returned before the reaper exited"
        job.process.send_signal(signal.SIGKILL)
        job.process.wait()
        time.sleep(2)
        assert _alive(job.child_pid) and newer.exists()
        assert (SHM / f"sem.loky-{job.child_pid}-specbatchtest").exists()
    finally:
        job.kill_all()
        if job.child_pid:
            (SHM / f"sem.loky-{job.child_pid}-specbatchtest").unlink(missing_ok=True)


def test_a_normal_stop_removes_only_the_semaphores_of_exited_engine_processes(
    tmp_path: Path, shm_files: tuple[Path, Path]
) -> None:
    """vLLM's worker leaves its loky semaphore behind on a normal shutdown; the reaper tidies it once that process
    has exited, and touches nothing else (the newer file here is no semaphore: only a kill clears such files)."""
    older, newer = shm_files
    job = Job(tmp_path, older, newer, "stop-after-exit")
    try:
        job.wait_started()
        assert not _alive(job.child_pid) and not _alive(job.reaper_pid)
        assert not (SHM / f"sem.loky-{job.child_pid}-specbatchtest").exists()
        assert older.exists() and newer.exists()
    finally:
        job.kill_all()
        if job.child_pid:
            (SHM / f"sem.loky-{job.child_pid}-specbatchtest").unlink(missing_ok=True)


def test_a_stop_after_the_engine_crashed_removes_what_it_left_in_shm(
    tmp_path: Path, shm_files: tuple[Path, Path]
) -> None:
    """A server under jobs/serve.py (or the job's llama-server) that crashed: ChildServer.stop tells the reaper, which
    removes the segments the dead processes made or used, and nothing older."""
    older, newer = shm_files
    job = Job(tmp_path, older, newer, "stop-after-crash")
    try:
        job.wait_started()
        assert not _alive(job.child_pid) and not _alive(job.reaper_pid)
        assert not newer.exists(), "the segment the crashed process made was left"
        assert not (SHM / f"sem.loky-{job.child_pid}-specbatchtest").exists()
        assert older.exists(), "a file older than the reaper was removed"
    finally:
        job.kill_all()
        if job.child_pid:
            (SHM / f"sem.loky-{job.child_pid}-specbatchtest").unlink(missing_ok=True)


def test_mapped_files_reads_this_process_maps_and_leaves_removed_files_out(tmp_path: Path) -> None:
    from specbatch.serving.shm import _mapped_files

    kept, removed = tmp_path / "kept file", tmp_path / "removed"
    maps = []
    for path in (kept, removed):
        path.write_bytes(b"\0" * 4096)
        with path.open("r+b") as handle:
            maps.append(mmap.mmap(handle.fileno(), 4096))
    removed.unlink()
    try:
        paths = _mapped_files(os.getpid())
        assert str(kept) in paths, "a path with a space is read whole"
        assert not any(p.startswith(str(removed)) for p in paths)
    finally:
        for mapped in maps:
            mapped.close()
    with pytest.raises(psutil.NoSuchProcess):
        _mapped_files(2**22 + 1)


# A child of the job (as vLLM's engine core is) makes a SharedMemory segment, registered with the resource tracker it
# shares with the job. "release"/"keep": the child is killed before it can unlink it (vLLM's shutdown kills a core
# that is slow to exit), then the job releases what its children leaked, or not. "closing": the child unlinks its own
# segment on SIGTERM, a second after unmapping it (vLLM's worker, signalled by Slurm together with its engine core,
# whose shutdown then returns while the worker is still closing), and the job releases at once.
_LEAKER = textwrap.dedent(
    """
    import multiprocessing, os, signal, sys, time
    from multiprocessing import shared_memory
    from specbatch.serving.shm import release_leaked_shm, shm_of_children

    def make(queue):
        segment = shared_memory.SharedMemory(create=True, size=4096)
        def close(signum, frame):
            segment.close()  # unmapped: nothing shows it is still in use but that its maker still runs
            time.sleep(1.0)
            try:
                segment.unlink()
            except FileNotFoundError:
                sys.exit(3)  # removed under it: vLLM prints a traceback here
            sys.exit(0)
        signal.signal(signal.SIGTERM, close)
        queue.put(segment.name)
        # Not signal.pause(): a SIGTERM that lands after the interpreter last checked for signals but before pause()
        # blocks is never seen by it, and the maker waits forever (seen once in a loaded suite: 180 s timeout).
        # A short sleep returns, and the handler runs, whenever the signal came.
        while True:
            time.sleep(0.05)

    if __name__ == "__main__":
        mode = sys.argv[1]
        spawn = multiprocessing.get_context("spawn")
        queue = spawn.Queue()
        child = spawn.Process(target=make, args=(queue,))
        child.start()
        name = queue.get(timeout=60)
        seen = shm_of_children()
        os.kill(child.pid, signal.SIGTERM if mode == "closing" else signal.SIGKILL)
        if mode == "closing":
            release_leaked_shm(seen)
        child.join()
        if mode == "release":
            release_leaked_shm(seen)
        print(name, child.exitcode, sorted(seen.paths))
    """
)


def run_leaker(tmp_path: Path, mode: str) -> tuple[str, str, str, str]:
    """The segment's name, the child's exit code, the paths seen, and the job's stderr."""
    script = tmp_path / "leaker.py"  # a file: spawn re-imports the child's function from it
    script.write_text(_LEAKER)
    result = subprocess.run([sys.executable, str(script), mode], capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    name, exitcode, seen = result.stdout.split(" ", 2)
    assert f"/dev/shm/{name.lstrip('/')}" in seen, "the child's segment was found among what it maps"
    assert not Path("/dev/shm", name.lstrip("/")).exists()
    return name, exitcode, seen, result.stderr


@pytest.mark.parametrize("release", [True, False])
def test_a_segment_whose_maker_was_killed_is_removed_and_leaves_no_tracker_warning(
    release: bool, tmp_path: Path
) -> None:
    _, _, _, stderr = run_leaker(tmp_path, "release" if release else "keep")
    if release:
        assert "resource_tracker" not in stderr and "Traceback" not in stderr, stderr
    else:  # what the job printed before: the tracker warns, then removes it itself
        assert "leaked shared_memory objects" in stderr, stderr


def test_a_segment_whose_maker_is_still_closing_is_left_for_it_to_unlink(tmp_path: Path) -> None:
    _, exitcode, _, stderr = run_leaker(tmp_path, "closing")
    assert exitcode == "0", "the job removed the segment while its maker was still closing"
    assert "Traceback" not in stderr and "resource_tracker" not in stderr, stderr


def test_the_engine_folders_of_jobs_that_are_gone_are_removed_and_no_other(tmp_path: Path, monkeypatch) -> None:
    """remove_dead_ipc_dirs (each engine's start): a folder made by an engine of a job killed since goes, with the
    rendezvous file in it; the folder of a running job, of another host, of an older naming, and a rendezvous file
    of another process (bare in the temp folder) stay."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    made = reaper.make_ipc_dir()
    assert made.parent == tmp_path and made.name.startswith(f"{reaper.IPC_PREFIX}{reaper._host()}-{os.getpid()}-")
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = int(ended.stdout)

    def folder(name: str, mtime: float | None = None) -> Path:
        path = tmp_path / name
        path.mkdir()
        (path / f"vllm_dist_{uuid.uuid4().hex}").write_text("")
        if mtime is not None:
            os.utime(path, (mtime, mtime))
        return path

    host = reaper._host()
    killed = folder(f"{reaper.IPC_PREFIX}{host}-{gone}-abcd1234")
    # This process's pid, on a folder last changed a day before it started: the pid is another process's now.
    reused = folder(f"{reaper.IPC_PREFIX}{host}-{os.getpid()}-efgh5678", mtime=psutil.Process().create_time() - 86400)
    running = folder(f"{reaper.IPC_PREFIX}{host}-{os.getpid()}-ijkl9012")
    elsewhere = folder(f"{reaper.IPC_PREFIX}0badc0de-{gone}-mnop3456")
    older_naming = folder(f"{reaper.IPC_PREFIX}qrst7890")
    loose = tmp_path / f"vllm_dist_{uuid.uuid4().hex}"
    loose.write_text("")

    assert sorted(reaper.remove_dead_ipc_dirs()) == sorted([killed, reused])
    assert not killed.exists() and not reused.exists()
    for kept in (made, running, elsewhere, older_naming, loose):
        assert kept.exists(), kept
