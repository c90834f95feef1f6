"""The offline vLLM engine's step load for real (embedded SmolLM2, float32, n-gram k 3, 4 requests at once): the
job's steps file holds every step that ran, and its figures add up to the rows' and vLLM's own counters."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import compose_job
from specbatch.engine import start_engine
from specbatch.engine.spec_metrics import Counters
from specbatch.pipeline import run_job
from specbatch.run.records.steps_file import read_all_steps

pytestmark = pytest.mark.slow

ROWS, BATCH = 12, 4


def test_the_steps_file_adds_up_to_the_rows_and_the_counters(tmp_path: Path) -> None:
    job = compose_job(
        [
            "spec=ngram",
            "spec.num_speculative_tokens=3",
            "model.dtype=float32",
            f"max_samples={ROWS}",
            "sampling.max_tokens=24",
            f"engine.max_num_seqs={BATCH}",
            "chunk_size=6",
            # Nothing here compares timings: no warm-up request.
            "engine.warmup=false",
            "tracking=off",
            f"output_root={tmp_path}",
        ]
    )
    engine = start_engine(job)
    try:
        result = run_job(job, engine=engine)
    finally:
        engine.close()
    layout = result.folder
    rows = [r for p in sorted(layout.data_dir.glob("part-*.parquet")) for r in pq.read_table(p).to_pylist()]
    assert len(rows) == ROWS and all(r["status"] == "ok" for r in rows)

    [table] = read_all_steps(layout.steps_dir)
    assert (layout.steps_dir / "0000.parquet").is_file()
    assert table.setup == job.spec.label and table.concurrency == BATCH == engine.concurrency
    steps = table.columns
    assert len(table) > 0 and all(0 < r <= BATCH for r in steps["requests"])
    # The batch was full while the queue held rows.
    assert max(steps["requests"]) == BATCH
    # Every token of every row was produced in a timed step, every prompt prefilled in one.
    assert sum(steps["tokens"]) == sum(r["completion_tokens"] for r in rows) == result.summary.output_tokens
    assert sum(steps["prompt_tokens"]) == sum(r["prompt_tokens"] for r in rows)
    # The draft tokens verified are vLLM's counter differences over the loop (the launch record's, the summary's).
    [record] = [json.loads(p.read_text()) for p in layout.stats_dir.glob("launch-*.json")]
    counted = Counters.from_dict(record["counters"])
    assert sum(steps["draft_tokens"]) == counted.draft_tokens == result.summary.draft_tokens > 0
    assert any(d > 0 for d in steps["draft_tokens"]) and all(d <= 3 * BATCH for d in steps["draft_tokens"])
    assert all(s > 0 for s in steps["seconds"]) and steps["at"] == sorted(steps["at"])
