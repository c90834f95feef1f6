"""A stop is the process's: a SIGTERM that comes once a stream's chunks were all admitted (nothing left for the
stream to stop) still ends the job once they are written, and a Hydra sweep launches no further job."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import PROJECT_ROOT, assert_one_line_stop

INJECT = PROJECT_ROOT / "tests" / "inject_stop.py"


def test_a_stop_in_a_sweep_jobs_last_wave_finishes_that_job_and_launches_no_other(tmp_path: Path) -> None:
    # 8 rows in 2 chunks, all admitted at the first step (the dummy takes 256 requests at once): the signal comes at
    # that step, in the first job's last (only) wave.
    sweep = tmp_path / "sweep"
    args = ["-m", "spec=none,ngram,suffix", "engine.backend=dummy", "tracking=off", "max_samples=8", "chunk_size=4"]
    args += [f"output_root={tmp_path / 'out'}", f"hydra.sweep.dir={sweep}"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "INJECT_SIGTERM_AT_STEP": "1"}
    result = subprocess.run(
        [sys.executable, str(INJECT), *args], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    output = result.stdout + result.stderr
    assert result.returncode == 143, output[-3000:]
    assert_one_line_stop(output)
    assert "once shard shard-00000-of-00001 was complete" in output and "no further job of this sweep" in output
    # The first job's shard is whole and done; Hydra launched neither of the others.
    [job] = [json.loads(p.read_text()) for p in sweep.glob("*/specbatch_run.json")]
    root = Path(job["run_folder"])
    assert (root / "done" / "shard-00000-of-00001").is_file() and "failed" not in job
    assert [p.parent.parent.name for p in (tmp_path / "out").glob("runs/*/*/*/run.json")] == [root.parent.name]
    assert " #1 : " not in output and " #2 : " not in output
