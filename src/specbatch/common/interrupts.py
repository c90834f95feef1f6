"""SIGTERM and SIGINT as requests to stop, never as a death in the middle of a chunk.

Slurm (a time limit, ``scancel``, a pre-emption), ``timeout`` and systemd send SIGTERM, Slurm to every process of
the step, and follow it with SIGKILL after a grace period (Slurm's KillWait: 30 s by default); Ctrl-C sends SIGINT
to the terminal's foreground process group. While chunks stream (:func:`stop_signals_deferred`), the first signal
only stops admission: the chunks in flight are finished and written for at most ``stop_grace_seconds``, then
abandoned (nothing of theirs is written), and the job stops without the done marker, so a rerun (or Slurm's
requeue) generates only what is left. A second signal stops at once. Before and after streaming
(:func:`stop_signals_raise`: reading the data, starting the engine) a signal stops the job at once.

A stop is the process's, not one stream's: once a signal came, whichever handler took it, nothing new begins. Each
place where something begins (an engine's start, a stream of chunks, a phase of spec=auto, the next job of a Hydra
multirun) asks :func:`raise_if_stopped` first, so a signal that came while a stream's last chunks were finishing
(admission already over, nothing left for it to stop) still ends the job when that stream is done.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from types import FrameType

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# Exit code of a job stopped by SIGTERM: what a shell reports for a process killed by that signal (128 + 15).
EXIT_STOPPED = 128 + signal.SIGTERM
# ... and by SIGINT (Ctrl-C): 128 + 2.
EXIT_INTERRUPTED = 128 + signal.SIGINT


class StopRequested(Exception):
    """The job was asked to stop (SIGTERM or SIGINT) and did; every chunk it wrote is whole."""

    def __init__(self, message: str, signum: int = signal.SIGTERM) -> None:
        super().__init__(message)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def signal_name(signum: int) -> str:
    return signal.Signals(signum).name


@dataclass
class _Received:
    """The first stop signal this process received in any handler of this module (None: none yet)."""

    signum: int | None = None


_received = _Received()


def _record(signum: int) -> None:
    if _received.signum is None:
        _received.signum = signum


def stop_received() -> int | None:
    """The first stop signal this process received (SIGTERM or SIGINT), or None."""
    return _received.signum


def raise_if_stopped(before: str, kept: str = "every chunk written before it is kept") -> None:
    """Once a stop signal came, nothing new begins: StopRequested saying it stopped ``before`` what (e.g. "starting
    the engine"), and what of the run is kept."""
    signum = _received.signum
    if signum is not None:
        raise StopRequested(
            f"stopped by {signal_name(signum)} before {before}: {kept}; rerun the same command to go on", signum
        )


def forget_stop() -> None:
    """For a process that handled a stop and goes on (a test, an interactive session): the next signal is new."""
    _received.signum = None


@dataclass
class StopSignal:
    """The first stop signal received while streaming (None: none yet). Calling it says whether one came."""

    signum: int | None = None
    # time.monotonic() when it came.
    at: float = 0.0
    # What to say about it, said by the first caller after it came: logging inside the signal handler itself can
    # land in the middle of another log call ("reentrant call" in the stream's flush).
    message: str = ""
    # Why the chunks in flight are being abandoned, once a stop at once was put off (it came inside a log call).
    abandoning: str = ""

    def __call__(self) -> bool:
        if self.message:
            message, self.message = self.message, ""
            log.warning("%s", message)
        return self.signum is not None

    @property
    def name(self) -> str:
        return signal_name(self.signum) if self.signum is not None else ""


# How soon a stop at once that came inside a log call is raised again.
RETRY_SECONDS = 0.05
_LOGGING_DIR = os.path.dirname(logging.__file__) + os.sep


def _put_off_inside_logging(frame: FrameType | None) -> bool:
    """Whether a stop at once must wait: the main thread was inside the logging package (a handler's emit or flush)
    when the signal came, and logging catches any Exception its handlers raise, prints it as a "Logging error" and
    goes on, so the stop would be lost. Then SIGALRM comes again in RETRY_SECONDS, and its handler raises the stop
    (the caller keeps what to raise)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith(_LOGGING_DIR):
            signal.setitimer(signal.ITIMER_REAL, RETRY_SECONDS)
            return True
        frame = frame.f_back
    return False


def _in_main_thread() -> bool:
    # Signal handlers can only be set (and only run) in the main thread.
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def _handlers(handler: signal.Handlers | object, signums: tuple[int, ...]) -> Iterator[None]:
    previous = {signum: signal.signal(signum, handler) for signum in signums}  # type: ignore[arg-type]
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


@contextlib.contextmanager
def stop_signals_raise(what: str = "before any chunk was generated") -> Iterator[None]:
    """Inside, SIGTERM and SIGINT raise StopRequested wherever the main thread is (Python's own Ctrl-C would be a
    KeyboardInterrupt traceback, and SIGTERM's default a death without a word or an MLflow status)."""
    if not _in_main_thread():
        yield
        return

    put_off: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        _record(signum)
        if _put_off_inside_logging(frame):
            put_off[:] = [signum]
            return
        raise StopRequested(f"stopped by {signal_name(signum)} {what}", signum)

    def on_timer(signum: int, frame: FrameType | None) -> None:
        if put_off:
            handler(put_off[0], frame)

    with _handlers(handler, STOP_SIGNALS), _handlers(on_timer, (signal.SIGALRM,)):
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)


@contextlib.contextmanager
def stop_signals_deferred(grace_seconds: float, first_stop: str | None = None) -> Iterator[StopSignal]:
    """Inside, the first SIGTERM/SIGINT only sets the yielded flag and starts a timer: ``grace_seconds`` later (or at
    a second signal) StopRequested is raised wherever the main thread is, abandoning what is in flight. The previous
    handlers come back after. Outside the main thread nothing changes and the flag stays unset. ``first_stop`` is
    what the warning says the first signal does, for a caller that does not finish the chunks in flight (Ray)."""
    stop = StopSignal()
    if not _in_main_thread():
        yield stop
        return

    def abandon(why: str, frame: FrameType | None) -> None:
        assert stop.signum is not None
        if _put_off_inside_logging(frame):
            stop.abandoning = why
            return
        raise StopRequested(
            f"stopped by {stop.name} ({why}): the chunks in flight were abandoned, nothing of theirs was written",
            stop.signum,
        )

    def on_stop(signum: int, frame: FrameType | None) -> None:
        if stop.signum is not None:
            abandon(f"sent twice, after {time.monotonic() - stop.at:.0f} s", frame)
            return
        stop.signum, stop.at = signum, time.monotonic()
        _record(signum)
        stop.message = f"{stop.name} received: " + (
            first_stop
            or f"finishing the chunks in flight for at most {grace_seconds:g} s (stop_grace_seconds), then stopping "
            "(the shard is marked done only if none of it is left); send it again to stop at once"
        )
        signal.setitimer(signal.ITIMER_REAL, max(grace_seconds, 0.001))

    def on_timer(signum: int, frame: FrameType | None) -> None:
        abandon(stop.abandoning or f"not finished within stop_grace_seconds={grace_seconds:g}", frame)

    with _handlers(on_stop, STOP_SIGNALS), _handlers(on_timer, (signal.SIGALRM,)):
        try:
            yield stop
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)


def leave_the_jobs_process_group() -> None:
    """Called in processes vLLM spawns for its engine (engine core, workers), which re-import the job's main file:
    Ctrl-C, ``timeout`` or ``kill -TERM -- -<pgid>`` signal the job's process group, and vLLM's engine processes
    shut down on SIGTERM/SIGINT at once, so the job could not finish its chunks in flight. In a group of their
    own, only the job hears those signals and stops its engine itself. (Slurm signals every process of a step
    whatever its group: the job then abandons the chunks in flight instead, see run.streaming.) A job killed by
    SIGKILL leaves them to specbatch.serving.reaper, which ends them by pid."""
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
