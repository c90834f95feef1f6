"""SIGTERM as a request to stop between chunks.

Slurm sends SIGTERM before a time limit or a pre-emption (and SIGKILL KillWait seconds later). Dying in the middle
of a chunk would throw away the rows generated so far; instead the job admits no new chunk, finishes and writes the
chunks in flight, and stops without the done marker, so a rerun (or Slurm's requeue) generates only what is left.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Callable, Iterator

log = logging.getLogger(__name__)

# Exit code of a job stopped by SIGTERM: what a shell reports for a process killed by that signal (128 + 15).
EXIT_STOPPED = 143


class StopRequested(Exception):
    """The job was asked to stop (SIGTERM) and did, after writing the chunks in flight."""


@contextlib.contextmanager
def sigterm_deferred() -> Iterator[Callable[[], bool]]:
    """Inside, SIGTERM only sets a flag; yields the function that reads it. The previous handler comes back after.

    Outside the main thread (signal handlers can only be set there) nothing changes and the flag stays False.
    """
    if threading.current_thread() is not threading.main_thread():
        yield lambda: False
        return
    received = threading.Event()

    def handler(signum: int, frame: object) -> None:
        if not received.is_set():
            log.warning("SIGTERM received: finishing the chunks in flight, then stopping without the done marker")
        received.set()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield received.is_set
    finally:
        signal.signal(signal.SIGTERM, previous)
