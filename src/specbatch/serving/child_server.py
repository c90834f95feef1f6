"""A server the job starts as a child process (vLLM's OpenAI server, llama.cpp's llama-server): launched in its own
session, waited for until healthy, and stopped with its whole process group.

Processes: the server gets its own session, hence its own process group holding every process it starts;
:meth:`ChildServer.stop` ends that whole group (SIGTERM, SIGKILL after a grace period), and a Ctrl-C in the terminal
reaches only the parent, which then stops the server in order. If the parent is killed outright (``kill -9``), the
reaper of :mod:`specbatch.serving.reaper`, started before the server, finds the server among the dead parent's
descendants and ends them and their shared memory, exactly as it does for the offline engine.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

import httpx
import psutil

from specbatch.serving.reaper import Reaper, abandon_start, remove_ipc_dir
from specbatch.serving.shm import shm_used_by

log = logging.getLogger(__name__)

# Between SIGTERM to the server's group and SIGKILL (vLLM's API and engine processes stop in about 5 s on CPU).
GRACE_SECONDS = 15.0
# How often /health is asked while the server starts (start-up takes 20-40 s on CPU, minutes for a big GPU model).
POLL_SECONDS = 0.5
# Lines of the server's log quoted when it fails.
TAIL_LINES = 30


class ServerStartError(RuntimeError):
    """The server exited or did not answer /health in time; the message quotes the end of its log."""


def _tail(path: Path, lines: int = TAIL_LINES) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(cannot read {path}: {exc})"


def _group_members(pgid: int) -> list[psutil.Process]:
    """Live processes of the process group (zombies are dead already and only wait for their parent)."""
    members = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == pgid and process.status() != psutil.STATUS_ZOMBIE:
                members.append(process)
        except (OSError, psutil.Error):
            continue
    return members


class ChildServer:
    """A running server started for a job; a context manager that stops it on exit."""

    # What log lines and errors call it.
    label = "the server"

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        url: str,
        log_path: Path,
        reaper: Reaper | None,
        ipc_dir: Path | None = None,
    ) -> None:
        self.process = process
        # The OpenAI API base (engine.url, ending in /v1); the server's root serves /health and /metrics.
        self.url = url.rstrip("/")
        self.root = self.url.removesuffix("/v1")
        self.log_path = log_path
        self._reaper = reaper
        # The server's own folder of IPC sockets (a vLLM server's engine), removed once its group is gone.
        self.ipc_dir = ipc_dir
        self._stopped = False

    @property
    def pid(self) -> int:
        return self.process.pid

    @classmethod
    def launch(
        cls,
        argv: Sequence[str],
        env: dict[str, str],
        url: str,
        log_path: Path,
        *,
        timeout: float,
        ipc_dir: Path | None = None,
    ) -> Self:
        """Start ``argv`` in its own session (output to ``log_path``) and return once ``/health`` answers 200; a
        server that exits or stays unhealthy for ``timeout`` seconds is stopped and raises ServerStartError.
        ``ipc_dir``: a folder the server keeps its IPC sockets in (see reaper.make_ipc_dir), removed when it stops,
        or by the reaper if this process is killed."""
        log.info("starting %s (log: %s): %s", cls.label, log_path, " ".join(argv))
        # Before the server: a kill of this process during the start-up would leave it running too.
        reaper = Reaper.start(ipc_dir)
        try:
            with log_path.open("ab") as out:
                process = subprocess.Popen(
                    list(argv),
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                )
        except BaseException:
            abandon_start(reaper, ipc_dir)
            raise
        server = cls(process, url, log_path, reaper, ipc_dir)
        try:
            server.wait_healthy(timeout)
        except BaseException:
            server.stop()
            raise
        return server

    def wait_healthy(self, timeout: float) -> None:
        began = time.monotonic()
        # trust_env off: a proxy from the environment must not stand between us and our own child.
        with httpx.Client(timeout=5.0, trust_env=False) as client:
            while True:
                if self.process.poll() is not None:
                    raise ServerStartError(
                        f"{self.label} exited with code {self.process.returncode} while starting; the end of "
                        f"{self.log_path}:\n{_tail(self.log_path)}"
                    )
                try:
                    if client.get(f"{self.root}/health").status_code == 200:
                        log.info("%s is healthy after %.0f s", self.label, time.monotonic() - began)
                        return
                except httpx.TransportError:
                    pass  # not listening yet
                if time.monotonic() - began > timeout:
                    raise ServerStartError(
                        f"{self.label} did not answer {self.root}/health within {timeout:.0f} s; the end of "
                        f"{self.log_path}:\n{_tail(self.log_path)}"
                    )
                time.sleep(POLL_SECONDS)

    def serve_until_signalled(self) -> int:
        """Block until SIGTERM or SIGINT (Ctrl-C), then stop the server and return 0; if the server exits by itself
        first, log the end of its log and return its exit code (1 if it was 0)."""
        stop = threading.Event()
        handlers = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            while not stop.is_set():
                if self.process.poll() is not None:
                    log.error(
                        "%s exited by itself with code %s; the end of %s:\n%s",
                        self.label,
                        self.process.returncode,
                        self.log_path,
                        _tail(self.log_path),
                    )
                    return self.process.returncode or 1
                stop.wait(POLL_SECONDS)
            log.info("stopping %s", self.label)
            return 0
        finally:
            self.stop()
            for sig, handler in handlers.items():
                signal.signal(sig, handler)

    def stop(self, grace: float = GRACE_SECONDS) -> None:
        """End the server's whole process group. Idempotent.

        SIGTERM goes to the API process first: vLLM's own shutdown then ends its engine processes in order (a
        SIGTERM to all of them at once leaves workers whose parent died first). What is left of the group once the
        API process is gone gets SIGTERM too, and the whole group SIGKILL after ``grace`` seconds.
        """
        if self._stopped:
            return
        self._stopped = True
        group = self.process.pid  # the leader of its own session, hence of its group
        # A server that exited by itself (crashed) or had to be killed did not clear its /dev/shm segments: a vLLM
        # server's are hundreds of MB.
        crashed = self.process.poll() is not None
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGTERM)
        if not self._wait_group_gone(grace, terminate_leftovers=True):
            log.warning("%s did not stop within %.0f s of SIGTERM: killing its process group", self.label, grace)
            crashed = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)
            self._wait_group_gone(5.0, terminate_leftovers=False)
        self.process.wait()
        # Only once the group is gone: otherwise the reaper still ends what is left when this process exits.
        if not _group_members(group):
            self._remove_ipc_dir()
            if self._reaper:
                self._reaper.stop(crashed=crashed)
        log.info("%s stopped (exit code %s)", self.label, self.process.returncode)

    def kill(self) -> None:
        """SIGKILL to the whole group at once, as a crash or a node loss would (tests use it), then clear what such a
        death leaves: the /dev/shm files the group held, which vLLM's own clean-up never gets to remove."""
        if self._stopped:
            return
        self._stopped = True
        group = self.process.pid
        # Frozen first, at once: reading a busy process's memory maps can take seconds, and a server that keeps
        # answering meanwhile is not the crash at this moment that the caller asked for.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGSTOP)
        held: set[str] = set()
        for member in _group_members(group):
            with contextlib.suppress(psutil.Error):
                held |= shm_used_by(member, maps=True)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
        self._wait_group_gone(10.0, terminate_leftovers=False)
        self.process.wait()
        for path in sorted(held):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        self._remove_ipc_dir()
        if self._reaper:
            self._reaper.stop()
        log.info("%s killed (%d shared-memory files removed)", self.label, len(held))

    def _remove_ipc_dir(self) -> None:
        ipc_dir, self.ipc_dir = self.ipc_dir, None
        if ipc_dir:
            remove_ipc_dir(ipc_dir)

    def _wait_group_gone(self, wait: float, *, terminate_leftovers: bool) -> bool:
        """True once no process of the server's group is left, within ``wait`` seconds."""
        group = self.process.pid
        deadline = time.monotonic() + wait
        while True:
            leader_done = self.process.poll() is not None  # also reaps it, or it would stay in the group as a zombie
            if not _group_members(group):
                return True
            if leader_done and terminate_leftovers:
                terminate_leftovers = False
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(group, signal.SIGTERM)
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()
