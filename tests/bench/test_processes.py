"""A benchmark's child job prints nothing on the benchmark's standard output, which holds the report alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbatch.bench.processes import run_generate


def test_a_child_jobs_logs_go_to_standard_error_not_to_the_report(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    overrides = ["engine.backend=dummy", "max_samples=2", "sampling.max_tokens=4", "tracking=off"]
    folder, shard, wall = run_generate(overrides, tmp_path / "out", "child")
    out, err = capfd.readouterr()
    assert out == ""
    # The job ran, and what it printed (Hydra's console handler writes to standard output) reached standard error.
    assert shard.read_summary().rows == 2 and folder.name.startswith("child-") and wall > 0
    assert "shard 0/1" in err, err[-2000:]
