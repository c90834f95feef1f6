"""Suffix decoding for real on CPU: the arctic-inference wheel built by set-up loads in vLLM and drafts tokens."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import compose_job, run_generate
from specbatch.layout import RunLayout

pytestmark = pytest.mark.slow


def test_suffix_run_writes_rows_with_acceptance(tmp_path: Path) -> None:
    args = [f"output_root={tmp_path}", "spec=suffix", "max_samples=2", "sampling.max_tokens=48", "tracking=off"]
    result = run_generate(args)
    assert result.returncode == 0, result.stderr[-4000:]
    layout = RunLayout.for_job(compose_job(args))
    rows = pq.read_table(layout.part_path(0)).to_pylist()
    summary = json.loads(layout.stats_path.read_text())
    assert len(rows) == 2 and all(r["method"] == "suffix" and r["num_speculative_tokens"] == 5 for r in rows)
    assert all(len(r["acceptance_histogram"]) == 6 for r in rows)
    assert sum(r["accepted_tokens"] for r in rows) == summary["accepted_tokens"] > 0
    assert sum(r["spec_steps"] for r in rows) == summary["drafts"]
    assert len(summary["acceptance_rate_per_position"]) == 5
    assert not (tmp_path / "mlflow.db").exists()  # tracking=off
