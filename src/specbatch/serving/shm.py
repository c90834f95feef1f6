"""What an engine's processes leave in /dev/shm, and how it is told apart from what others own.

vLLM's processes share memory through Python ``SharedMemory`` segments (``psm_*``: the ring buffers between engine
core and worker) and loky's named semaphores (``sem.loky-<pid>-*``); a process killed before its clean-up leaves them
behind. Used by the job after an engine's shutdown (:func:`release_leaked_shm`) and by the reaper process
(:mod:`specbatch.serving.reaper`) after the job's death or stop.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import psutil

log = logging.getLogger(__name__)

SHM = Path("/dev/shm")
# After an engine's shutdown, how long the job waits for its processes to exit before it removes the segments they
# leaked (they are normally gone already; a worker whose engine core was signalled with it may still be closing).
RELEASE_WAIT_SECONDS = 5.0


ShmEntry = tuple[str, int]  # path, inode


def shm_entries() -> set[ShmEntry]:
    if not SHM.is_dir():
        return set()
    return {(entry.path, entry.inode()) for entry in os.scandir(SHM)}


def shm_used_by(process: psutil.Process, maps: bool) -> set[str]:
    """/dev/shm files the process holds open; with ``maps`` also those it maps."""
    prefix = f"{SHM}/"
    paths = {f.path for f in process.open_files() if f.path.startswith(prefix)}
    if maps:
        paths.update(path for path in _mapped_files(process.pid) if path.startswith(prefix))
    return paths


@dataclass(frozen=True)
class ChildShm:
    """An engine's processes that map /dev/shm files the job does not, and those files: read before its shutdown."""

    processes: tuple[psutil.Process, ...] = ()
    paths: frozenset[str] = frozenset()


def shm_of_children() -> ChildShm:
    """/dev/shm files this process's descendants (an engine's processes) hold open or map, and this process not;
    with the descendants that use them (not, say, the resource tracker or the reaper, which map none)."""
    own = shm_used_by(psutil.Process(), maps=True)
    users: list[psutil.Process] = []
    paths: set[str] = set()
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            used = shm_used_by(child, maps=True) - own
            if used:
                users.append(child)
                paths |= used
    return ChildShm(tuple(users), frozenset(paths))


def release_leaked_shm(seen: ChildShm, wait_seconds: float = RELEASE_WAIT_SECONDS) -> None:
    """Python SharedMemory segments (``psm_*``) among ``seen.paths`` that are still there once their makers are gone:
    vLLM's shutdown killed the process that made one before it could unlink it. Removed, and taken off the resource
    tracker the engine's processes share with this one, which would otherwise print "resource_tracker: There appear
    to be N leaked shared_memory objects" when the job exits.

    The processes that used them are waited for first (at most ``wait_seconds``): a worker whose engine core was
    signalled with it (Slurm's SIGTERM at a time limit) outlives the core's shutdown while it unlinks its own ring
    buffer, and removing that under it made it print a FileNotFoundError traceback into the job's log. A segment a
    process still running maps is left to it."""
    from multiprocessing import resource_tracker

    started = time.monotonic()
    in_use: set[str] = set()
    for process in still_running(seen.processes, wait_seconds):
        with contextlib.suppress(psutil.Error):
            in_use |= shm_used_by(process, maps=True)
    log.debug(
        "waited %.2f s for the engine's processes; %d /dev/shm files still in use",
        time.monotonic() - started,
        len(in_use),
    )
    for path in sorted(seen.paths - in_use):
        name = os.path.basename(path)
        if name.startswith("psm_") and os.path.exists(path):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            resource_tracker.unregister(f"/{name}", "shared_memory")


def _mapped_files(pid: int) -> set[str]:
    """Paths in /proc/<pid>/maps. Not psutil's memory_maps(): that reads smaps, which walks the page tables of
    every mapping under the process's memory lock, far slower for a big engine process busy allocating."""
    try:
        text = Path(f"/proc/{pid}/maps").read_text(errors="replace")
    except FileNotFoundError:
        raise psutil.NoSuchProcess(pid) from None
    except PermissionError:
        raise psutil.AccessDenied(pid) from None
    # address perms offset dev inode [path]; a path may hold spaces. A file removed already is left out: its name
    # may belong to a new file by now.
    fields = (line.split(maxsplit=5) for line in text.splitlines())
    return {f[5] for f in fields if len(f) == 6 and not f[5].endswith(" (deleted)")}


def remove_if_unchanged(path: str, inode: int) -> bool:
    """Unlink ``path`` if it is still the file recorded (same inode) and ours; whether it was removed."""
    with contextlib.suppress(FileNotFoundError):
        stat = os.stat(path)
        if stat.st_ino == inode and stat.st_uid == os.getuid():
            os.unlink(path)
            return True
    return False


def gone(process: psutil.Process) -> bool:
    try:
        return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def still_running(processes: Iterable[psutil.Process], wait_seconds: float) -> list[psutil.Process]:
    """Those of ``processes`` still running after waiting at most ``wait_seconds`` for all of them to exit (a zombie
    has exited: it is not reaped here, so a child's parent still can)."""
    waited = list(processes)
    deadline = time.monotonic() + wait_seconds
    while not all(gone(p) for p in waited) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [p for p in waited if not gone(p)]


# loky's named semaphores (vLLM's EngineCore makes one) carry their creator's pid in the name. They are mapped, never
# held open, so when a group kill leaves no survivor to read the maps of, the name is what ties them to the job.
_LOKY_SEMAPHORE = re.compile(r"sem\.loky-(\d+)-")


def creator_pid(path: str) -> int | None:
    match = _LOKY_SEMAPHORE.match(os.path.basename(path))
    return int(match.group(1)) if match else None
