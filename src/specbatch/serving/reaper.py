"""A watchdog process that ends the engine's processes when the job dies without stopping them.

Why: vLLM 0.32 runs its EngineCore in a child process and the EngineCore runs the workers. The workers watch their
parent (a death pipe to the EngineCore), but the EngineCore only waits on ZeroMQ for its client and never notices
that the job is gone. After a ``kill -9`` of the job's main process, EngineCore and workers (GiBs of memory each)
keep running under PID 1, and their shared-memory ring buffers stay in /dev/shm; vLLM's own clean-up (atexit,
finalizers) never runs in a process killed that way.

How: ``Reaper.start()`` (called by ``VllmEngine.start`` before the ``LLM`` is built) starts ``python -m
specbatch.serving.reaper`` in its own session and passes it the read end of a pipe. The job keeps the write end,
close-on-exec, so the engine's spawned processes do not hold it. While the job lives, the reaper records the job's
descendants (pid and creation time, through psutil) and the /dev/shm files they hold open. The job dies -> the pipe
reaches EOF (or, if a forked child holds the write end, the reaper's parent changes): the reaper then ends the
recorded processes that still are the same processes, and their children (SIGTERM, SIGKILL after a grace period),
removes the /dev/shm entries they used that appeared after it started and are still the same files, and exits.
``Reaper.stop()`` (from ``Engine.close``, after vLLM's own shutdown) writes a stop byte first: the reaper then ends
nothing, removes only the loky semaphores of engine processes that have exited (vLLM leaves one per engine), and
exits.

It never signals a process that is not a descendant of the job, and never removes a file that existed before it
started, belongs to another user, or was replaced since.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from specbatch.serving.shm import (
    creator_pid,
    gone,
    remove_if_unchanged,
    shm_entries,
    shm_used_by,
    still_running,
)

# Named, not __name__: run as ``python -m`` this module is __main__.
log = logging.getLogger("specbatch.serving.reaper")

# How often the reaper records the job's descendants, and how soon it notices a parent change.
POLL_SECONDS = 0.5
# Between SIGTERM (vLLM's processes shut down on it) and SIGKILL.
GRACE_SECONDS = 3.0
# Written by the job before it closes the pipe: the engine was shut down the normal way ...
STOP = b"stop"
# ... or its processes are gone without shutting down the normal way (a server that crashed): what they held in
# /dev/shm is left to clear. Same length as STOP.
GONE = b"gone"
READY = "ready"
# How long the job waits for the reaper to start or to exit.
STARTUP_TIMEOUT_SECONDS = 30.0
STOP_TIMEOUT_SECONDS = 10.0
# After a normal stop, how long the reaper waits for the makers of leftover semaphores to exit (the job waits for the
# reaper, so this is time on the job's clock; well inside STOP_TIMEOUT_SECONDS).
TIDY_WAIT_SECONDS = 1.0


class Reaper:
    """The job's handle on its reaper process: started with the engine, stopped when the engine is closed."""

    def __init__(self, process: subprocess.Popen[bytes], writer: int) -> None:
        self.process = process
        self._writer: int | None = writer

    @classmethod
    def start(cls, ipc_dir: Path | None = None) -> Reaper | None:
        """Start the reaper for this process; None (with a warning) if it could not start. ``ipc_dir``: the engine's
        private folder of IPC sockets (see :func:`make_ipc_dir`), removed if the job dies."""
        reader, writer = os.pipe()  # both close-on-exec; pass_fds makes the read end the reaper's only
        package_root = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
        try:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "specbatch.serving.reaper",
                    str(os.getpid()),
                    str(reader),
                    *([str(ipc_dir)] if ipc_dir else []),
                ],
                pass_fds=(reader,),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                env=env,
                # Its own session: a kill of the job's process group (Ctrl-C, a group SIGKILL) does not take the
                # reaper with it, so it can still clear the shared memory of the processes killed with the job.
                start_new_session=True,
            )
        except OSError as exc:
            os.close(writer)
            log.warning("no reaper for the engine's processes (%s): a kill -9 of this job may leave them running", exc)
            return None
        finally:
            os.close(reader)
        reaper = cls(process, writer)
        assert process.stdout is not None
        # The reaper records /dev/shm as it is before answering: nothing the engine creates can be mistaken for older.
        with process.stdout:
            ready, _, _ = select.select([process.stdout], [], [], STARTUP_TIMEOUT_SECONDS)
            started = bool(ready) and process.stdout.readline().decode().strip() == READY
        if not started:
            reaper.stop()
            log.warning("the reaper did not start: a kill -9 of this job may leave the engine's processes running")
            return None
        log.debug("reaper %d watches this job (%d)", process.pid, os.getpid())
        return reaper

    def stop(self, crashed: bool = False) -> None:
        """The engine was shut down normally (or, ``crashed``, its processes are all gone anyway): let the reaper
        exit without ending anything; after a crash it first removes the /dev/shm entries they left."""
        writer, self._writer = self._writer, None
        if writer is None:
            return
        with contextlib.suppress(OSError):  # a reaper that already exited closed its end
            os.write(writer, GONE if crashed else STOP)
        os.close(writer)
        try:
            self.process.wait(timeout=STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            log.warning("reaper %d did not stop within %.0f s; killing it", self.process.pid, STOP_TIMEOUT_SECONDS)
            self.process.kill()
            self.process.wait()


# vLLM's engines leave files in the temp folder that nothing removes: IPC sockets named by UUID under
# VLLM_RPC_BASE_PATH (default /tmp; a day of runs left 531 there) and, from every engine killed before its torch
# process group closed (a kill -9, a SIGTERM during its start), the group's rendezvous file vllm_dist_<hex> (in
# tempfile.gettempdir()), whoever made it. Each engine gets a folder of its own for both, removed with the engine, by
# the reaper after a kill, or, for an engine in the job's own process (which has no reaper), at the next start of an
# engine once its job is gone: its name says whose it is, <prefix><host>-<pid of the job>-<random>.
IPC_PREFIX = "specbatch-vllm-ipc-"
# A local Ray's session folder (specbatch.cluster.ray_connect), handed to its reaper as its folder to remove if the
# job dies: short, since Ray's socket paths inside it must fit in 107 bytes.
RAY_DIR_PREFIX = "sbray-"
_OWNED = re.compile(rf"^{re.escape(IPC_PREFIX)}(?P<host>[0-9a-f]{{8}})-(?P<pid>\d+)-")
# How much later than a folder's last change its owner's pid may have been started and still be its owner
# (process start times are known to the clock tick, folder times to the nanosecond).
_PID_REUSE_SLACK_SECONDS = 1.0


def _host() -> str:
    """This machine in a folder's name: a temp folder may be shared (NFS), and a pid means nothing elsewhere."""
    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]


def make_ipc_dir() -> Path:
    """A new folder for an engine of this process, named as this host's and this process's."""
    return Path(tempfile.mkdtemp(prefix=f"{IPC_PREFIX}{_host()}-{os.getpid()}-"))


def remove_dead_ipc_dirs() -> list[Path]:
    """Remove the engine folders in the temp folder whose job is gone (a kill -9 left them): made on this host, by
    this user, by a process that no longer runs (or whose pid another process started since has). Folders of running
    jobs, of other hosts or users, and of an older naming are left; returns those removed."""
    removed = []
    for path in Path(tempfile.gettempdir()).glob(f"{IPC_PREFIX}*"):
        owner = _OWNED.match(path.name)
        with contextlib.suppress(OSError):
            stat = path.stat()
            if owner is None or owner["host"] != _host() or stat.st_uid != os.getuid() or not path.is_dir():
                continue
            if _runs_since(int(owner["pid"]), stat.st_mtime):
                continue
            shutil.rmtree(path, ignore_errors=True)
            log.info("removed %s, left by the engine of a job that is gone (process %s)", path, owner["pid"])
            removed.append(path)
    return removed


def _runs_since(pid: int, changed: float) -> bool:
    """Whether process ``pid`` runs and was started before ``changed`` (so it can be the one that made the folder)."""
    try:
        return psutil.Process(pid).create_time() <= changed + _PID_REUSE_SLACK_SECONDS
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:  # another user's process: it is running, and not known to be new
        return True


def remove_ipc_dir(path: Path) -> None:
    """Remove an engine's IPC folder: only one :func:`make_ipc_dir` (or a local Ray's start) made (its name, this
    user's)."""
    with contextlib.suppress(OSError):
        owned = path.name.startswith((IPC_PREFIX, RAY_DIR_PREFIX))
        if owned and path.is_dir() and path.stat().st_uid == os.getuid():
            shutil.rmtree(path, ignore_errors=True)


def abandon_start(reaper: Reaper | None, ipc_dir: Path | None) -> None:
    """A start raised, leaving no process (none started, or vLLM ended its own): the reaper and IPC folder go."""
    if reaper:
        reaper.stop()
    if ipc_dir:
        remove_ipc_dir(ipc_dir)


class Watch:
    """What the reaper knows of the job: its descendants and the /dev/shm files they used."""

    def __init__(self, job_pid: int, ipc_dir: Path | None = None) -> None:
        self.job_pid = job_pid
        self.ipc_dir = ipc_dir
        self.job = psutil.Process(job_pid)
        self.shm_before = shm_entries()
        self.processes: set[psutil.Process] = set()  # hashed by pid and creation time: a reused pid is another
        # Every pid of the job's tree seen alive: a group kill can end them all before the last record.
        self.pids: set[int] = {job_pid}
        self.shm_paths: set[str] = set()

    def record(self) -> None:
        with contextlib.suppress(psutil.NoSuchProcess):
            self.processes.update(self.job.children(recursive=True))
        self.processes.discard(psutil.Process())  # psutil.Process() is this reaper
        self.processes = {p for p in self.processes if p.is_running()}
        self.pids.update(p.pid for p in self.processes)
        for process in self.processes:
            with contextlib.suppress(psutil.Error):
                self.shm_paths |= shm_used_by(process, maps=False)

    def job_alive(self) -> bool:
        # A parent change means the job died even when a forked engine process still holds the pipe open.
        return os.getppid() == self.job_pid

    def tidy(self) -> None:
        """After a normal stop: remove the loky semaphores the engine's processes made and did not unlink.

        vLLM's worker makes one (``sem.loky-<pid>-*``) and may exit without unlinking it, so an engine could leave
        32 bytes in /dev/shm. Only entries that appeared after the reaper started, are still the same file, and were
        made by one of the job's descendants (not the job) that has exited are removed; the job's own, and those of
        processes still running, stay. Only the makers of such entries are waited for (the worker is normally gone
        when vLLM's shutdown returns), for at most TIDY_WAIT_SECONDS: the job waits for this."""
        candidates = [
            (path, inode)
            for path, inode in sorted(shm_entries() - self.shm_before)
            if creator_pid(path) in self.pids and creator_pid(path) != self.job_pid
        ]
        makers = {p for p in self.processes if p.pid in {creator_pid(path) for path, _ in candidates}}
        running = {p.pid for p in still_running(makers, TIDY_WAIT_SECONDS)}
        for path, inode in candidates:
            if creator_pid(path) not in running and remove_if_unchanged(path, inode):
                log.debug("removed %s left by the engine's process %s", path, creator_pid(path))

    def remove_left_shm(self) -> None:
        """After the job said its engine's processes are gone (a crash): remove the /dev/shm entries that appeared
        since the reaper started and that they used or made, unless a process of the job still running uses them
        (the job's own are never touched)."""
        running = [p for p in self.processes if not gone(p)]
        in_use: set[str] = set()
        for process in [self.job, *running]:
            with contextlib.suppress(psutil.Error):
                in_use |= shm_used_by(process, maps=True)
        dead_pids = self.pids - {p.pid for p in running} - {self.job_pid}
        for path, inode in sorted(shm_entries() - self.shm_before):
            if path in in_use or not (path in self.shm_paths or creator_pid(path) in dead_pids):
                continue
            if remove_if_unchanged(path, inode):
                log.warning("removed %s left by the crashed engine of job %d", path, self.job_pid)

    def reap(self) -> None:
        """End what the dead job left running, then remove its /dev/shm entries."""
        survivors: set[psutil.Process] = set()
        for process in self.processes:
            with contextlib.suppress(psutil.NoSuchProcess):
                if process.is_running():
                    survivors.add(process)
                    survivors.update(process.children(recursive=True))
        survivors.discard(psutil.Process())
        if survivors:
            log.warning(
                "job %d died without stopping its engine: ending %s",
                self.job_pid,
                ", ".join(f"{p.pid} ({_name(p)})" for p in sorted(survivors, key=lambda p: p.pid)),
            )
        _signal(survivors, signal.SIGTERM)
        terminated = time.monotonic()
        for process in survivors:
            with contextlib.suppress(psutil.Error):
                # Read while they shut down (a process keeps its mappings until it exits): the maps also show
                # named semaphores, which are mapped but not held open.
                self.shm_paths |= shm_used_by(process, maps=True)
        _, alive = psutil.wait_procs(survivors, timeout=max(0.0, terminated + GRACE_SECONDS - time.monotonic()))
        # No wait after SIGKILL: those processes clean nothing up any more, and an unlinked segment is freed when
        # its last mapping goes.
        _signal(alive, signal.SIGKILL)
        owned = {
            (path, inode)
            for path, inode in shm_entries() - self.shm_before
            if path in self.shm_paths or creator_pid(path) in self.pids
        }
        for path, inode in sorted(owned):
            if remove_if_unchanged(path, inode):
                log.warning("removed %s left by job %d", path, self.job_pid)
        if self.ipc_dir is not None and self.ipc_dir.exists():
            remove_ipc_dir(self.ipc_dir)
            log.warning("removed %s left by job %d", self.ipc_dir, self.job_pid)


def _name(process: psutil.Process) -> str:
    try:
        return process.name()
    except psutil.Error:
        return "?"


def _signal(processes: set[psutil.Process] | list[psutil.Process], signum: signal.Signals) -> None:
    for process in processes:
        # is_running() compares the creation time, and psutil then refuses to signal a pid that is another process.
        with contextlib.suppress(psutil.Error):
            if process.is_running():
                process.send_signal(signum)


def _wait_for_job(reader: int, watch: Watch) -> bytes | None:
    """Record the job's processes until it stops the reaper (STOP or GONE) or dies (None)."""
    while True:
        watch.record()
        ready, _, _ = select.select([reader], [], [], POLL_SECONDS)
        if ready:
            data = os.read(reader, len(STOP))
            if data in (STOP, GONE):
                return data
            if not data:
                return None
        if not watch.job_alive():
            return None


def main(argv: list[str]) -> None:
    job_pid, reader = int(argv[0]), int(argv[1])
    ipc_dir = Path(argv[2]) if len(argv) > 2 else None
    # Only the job's end ends the reaper: a Ctrl-C or a SIGTERM meant for the job must not leave it unguarded.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s][%(levelname)s] - %(message)s")
    try:
        watch = Watch(job_pid, ipc_dir)
    except psutil.NoSuchProcess:
        return
    if not watch.job_alive():  # the job died while this process started: it has nothing recorded to end
        return
    print(READY, flush=True)
    sys.stdout.close()
    outcome = _wait_for_job(reader, watch)
    if outcome == STOP:
        watch.tidy()
    elif outcome == GONE:
        watch.tidy()
        watch.remove_left_shm()
    else:
        watch.reap()


if __name__ == "__main__":
    main(sys.argv[1:])
