"""Stop signals in the job's own process: deferred while streaming (grace timer, a second signal), raised otherwise,
with the exit code a shell would show, and the previous handlers back afterwards."""

from __future__ import annotations

import io
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from specbatch.common.interrupts import (
    EXIT_INTERRUPTED,
    EXIT_STOPPED,
    StopRequested,
    stop_signals_deferred,
    stop_signals_raise,
)


def wait_until(condition: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "the signal never arrived"
        time.sleep(0.01)


def test_outside_streaming_a_signal_stops_at_once_with_its_exit_code() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(StopRequested, match="stopped by SIGINT before any chunk") as stopped:
        with stop_signals_raise():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
    assert stopped.value.exit_code == EXIT_INTERRUPTED == 130
    assert signal.getsignal(signal.SIGTERM) is before


def test_while_streaming_the_first_signal_only_sets_the_flag_until_the_grace_runs_out() -> None:
    with pytest.raises(StopRequested, match=r"not finished within stop_grace_seconds=0.5") as stopped:
        with stop_signals_deferred(0.5) as stop:
            assert not stop()
            os.kill(os.getpid(), signal.SIGTERM)
            wait_until(stop)
            assert stop.name == "SIGTERM"
            time.sleep(10)  # the grace timer interrupts this
    assert stopped.value.exit_code == EXIT_STOPPED == 143
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_a_second_signal_stops_at_once_and_a_finished_stream_cancels_the_timer() -> None:
    with pytest.raises(StopRequested, match="sent twice"):
        with stop_signals_deferred(60) as stop:
            os.kill(os.getpid(), signal.SIGINT)
            wait_until(stop)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(10)
    with stop_signals_deferred(0.2) as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        wait_until(stop)
    time.sleep(0.5)  # past the grace: the timer went with the context, nothing is raised here
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


class _SlowStream(io.StringIO):
    """A stream whose every write takes a while (a slow terminal, a full pipe): a timer fires inside it."""

    def write(self, text: str) -> int:
        time.sleep(0.5)
        return super().write(text)


@pytest.fixture
def slow_log() -> Iterator[logging.Logger]:
    """A logger of its own whose only handler writes to a _SlowStream."""
    log = logging.getLogger("specbatch.test_interrupts.slow")
    handler = logging.StreamHandler(_SlowStream())
    log.addHandler(handler)
    log.propagate = False
    try:
        yield log
    finally:
        log.removeHandler(handler)
        log.propagate = True


def test_a_stop_at_once_that_comes_inside_a_log_call_is_not_lost_in_it(
    slow_log: logging.Logger, capsys: pytest.CaptureFixture[str]
) -> None:
    # Seen on a slow CPU: Ctrl-C with stop_grace_seconds=0 fired its timer while the job wrote a log line; logging
    # caught the stop, printed it as a "Logging error" traceback, and the job went on to finish its chunks.
    with pytest.raises(StopRequested, match=r"not finished within stop_grace_seconds=0.1\)"):
        with stop_signals_deferred(0.1) as stop:
            os.kill(os.getpid(), signal.SIGINT)
            wait_until(lambda: stop.signum is not None)
            slow_log.warning("a line being written when the grace runs out")
            # Put off while inside logging, the stop comes right after the call.
            time.sleep(5)
        pytest.fail("the stop was lost")
    assert "Logging error" not in capsys.readouterr().err
    [stream] = [h.stream for h in slow_log.handlers if isinstance(getattr(h, "stream", None), _SlowStream)]
    assert stream.getvalue() == "a line being written when the grace runs out\n"


def test_a_signal_before_streaming_that_comes_inside_a_log_call_still_stops_the_job(
    slow_log: logging.Logger, capsys: pytest.CaptureFixture[str]
) -> None:
    threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()
    with pytest.raises(StopRequested, match="stopped by SIGTERM while loading") as stopped:
        with stop_signals_raise("while loading"):
            slow_log.warning("a line being written when SIGTERM comes")
            time.sleep(5)
        pytest.fail("the stop was lost")
    assert stopped.value.exit_code == EXIT_STOPPED
    assert "Logging error" not in capsys.readouterr().err
