"""jobs/bench.py --startup's report (specbatch.bench.startup), its launches replaced: the machine line first, then
the medians per checkout and the ratio to the first; and a stopped bench, whose job process goes with it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specbatch.bench import machine_header, startup
from specbatch.common.environment import PROJECT_ROOT


def test_the_report_starts_with_the_machine_and_gives_medians_against_the_first(monkeypatch, tmp_path: Path) -> None:
    walls = {"before": iter([(20.0, 8.0), (19.0, 8.0), (21.0, 8.0)]), "after": iter([(18.0, 5.0)] * 3)}
    monkeypatch.setattr(startup, "_one_launch", lambda checkout, out: next(walls[checkout.name]))
    report = startup.startup_bench([tmp_path / "before", tmp_path / "after"], 3, tmp_path, "stamp").splitlines()
    assert report[0] == machine_header()
    [before] = [line for line in report if line.startswith(str(tmp_path / "before"))]
    [after] = [line for line in report if line.startswith(str(tmp_path / "after"))]
    assert before.split()[1:] == ["20.0", "8.0", "12.0", "1.000"]
    assert after.split()[1:] == ["18.0", "5.0", "13.0", "0.900"]


def test_a_stopped_bench_takes_the_job_it_runs_with_it(tmp_path: Path) -> None:
    """SIGTERM to jobs/bench.py alone (kill <pid>, as a user stops it): it exits 143 and the job process it started
    (here a stand-in checkout whose jobs/generate.py ignores SIGTERM and sleeps) is gone too, not left finishing."""
    checkout = tmp_path / "checkout"
    (checkout / "jobs").mkdir(parents=True)
    child_pid = tmp_path / "child.pid"
    (checkout / "jobs" / "generate.py").write_text(
        "import os, signal, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"open({str(child_pid)!r} + '.tmp', 'w').write(str(os.getpid()))\n"
        f"os.replace({str(child_pid)!r} + '.tmp', {str(child_pid)!r})\n"
        "time.sleep(600)\n"
    )
    command = [sys.executable, "jobs/bench.py", "--startup", str(checkout), "--repeats", "1"]
    bench = subprocess.Popen([*command, "--output-root", str(tmp_path / "out")], cwd=PROJECT_ROOT)
    try:
        deadline = time.monotonic() + 120  # the bench imports vLLM's config first: seconds, more on a busy machine
        while not child_pid.exists():
            assert bench.poll() is None and time.monotonic() < deadline, "the stand-in job never started"
            time.sleep(0.1)
        child = int(child_pid.read_text())
        bench.send_signal(signal.SIGTERM)
        assert bench.wait(timeout=60) == 128 + signal.SIGTERM
        with pytest.raises(ProcessLookupError):
            os.kill(child, 0)
    finally:
        if bench.poll() is None:
            bench.kill()
        if child_pid.exists():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(child_pid.read_text()), signal.SIGKILL)
