"""Stop signals in the job's own process: deferred while streaming (grace timer, a second signal), raised otherwise,
with the exit code a shell would show, and the previous handlers back afterwards."""

from __future__ import annotations

import os
import signal
import time

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
