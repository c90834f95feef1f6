"""What a person sees of a running shard: a bar on a terminal (the job in a pseudo terminal here), plain lines in a
log (a pipe here, as a Slurm log is a file)."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

from conftest import PROJECT_ROOT

SLOW_DUMMY = PROJECT_ROOT / "tests" / "slow_dummy.py"
# 12 rows, 2 samples each, 4 requests at a time, each dummy step 0.05 s: a few seconds of generation.
ARGS = ["engine.backend=dummy", "tracking=off", "max_samples=12", "sampling=sampled", "sampling.n=2"]
ARGS += ["engine.max_num_seqs=4", "sampling.max_tokens=32", "progress.interval_seconds=0.3"]
ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "DUMMY_STEP_SECONDS": "0.05"}


def run_in_a_terminal(args: list[str], timeout: float = 300) -> tuple[int, str]:
    """The job with a pseudo terminal (40 x 160) as its stdin, stdout and stderr; its exit code and all it wrote."""
    main, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    process = subprocess.Popen(
        [sys.executable, str(SLOW_DUMMY), *args],
        cwd=PROJECT_ROOT,
        env=ENV,
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        start_new_session=True,
    )
    os.close(terminal)
    output = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([main], [], [], 1.0)
            if not ready:
                continue
            try:
                chunk = os.read(main, 65536)
            except OSError:  # EIO: every end of the terminal is closed, the job is gone
                break
            if not chunk:
                break
            output += chunk
        code = process.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if process.poll() is None:
            process.kill()
        os.close(main)
    return code, output.decode(errors="replace")


# tqdm's bar as the job draws it: rows of the shard, samples, output tok/s, AL so far, elapsed and ETA.
BAR = re.compile(
    r"\r(?:\x1b\[[0-9;]*[A-Za-z])*ngram-k3 shard 0/1: +\d+%\|[^|\r\n]*\| +(\d+)/12 rows, (\d+)/24 samples, "
    r"[\d.]+ tok/s, AL [\d.]+ \[[\d:]+, ETA [\d:?]+\]"
)
LINE = re.compile(
    r"progress ngram-k3 shard 0/1: (\d+)/12 rows \(\d+%\), (\d+)/24 samples, [\d.]+ output tok/s, AL [\d.]+, "
    r"(ETA \d+:\d\d:\d\d|ETA unknown until a row is done) \(\d+ requests running or queued, \d+ chunks open\)"
)


def test_on_a_terminal_the_job_draws_a_bar_with_rows_samples_tok_s_al_and_eta(tmp_path: Path) -> None:
    code, output = run_in_a_terminal([*ARGS, f"output_root={tmp_path / 'out'}"])
    assert code == 0, output[-3000:]
    bars = BAR.findall(output)
    # Redrawn in place while rows finish, and left at the end, whole.
    assert len(bars) >= 2 and bars[-1] == ("12", "24"), output[-3000:]
    assert len({rows for rows, _ in bars}) >= 2, "the bar never moved"
    # The bar replaces the plain lines; the job's other log lines still show (above it).
    assert not LINE.search(output) and "chunk 0 written: 24 rows" in output


def test_without_a_terminal_the_job_logs_a_plain_line_every_interval(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(SLOW_DUMMY), *ARGS, f"output_root={tmp_path / 'out'}"],
        cwd=PROJECT_ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    lines = LINE.findall(output)
    assert len(lines) >= 2, output[-3000:]
    assert [int(rows) for rows, *_ in lines] == sorted(int(rows) for rows, *_ in lines)
    # No bar, no carriage return in a log.
    assert "\r" not in output and "%|" not in output
