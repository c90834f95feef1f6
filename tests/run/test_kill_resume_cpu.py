"""SIGKILL in the middle of generation, for real: the rerun finishes the shard with every row and sample exactly once
(two seeded samples per row, each its own request)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import compose_job, kill_job_group_when, run_generate
from specbatch.run.folder import RunFolder

pytestmark = pytest.mark.slow

N_ROWS = 12
SAMPLES = 2


def test_killed_shard_resumes_to_exactly_once(tmp_path: Path) -> None:
    args = [
        f"output_root={tmp_path}",
        f"max_samples={N_ROWS}",
        "model.dtype=float32",
        "chunk_size=3",
        # Two requests at once and four queued: several chunks are in flight, the last ones not yet admitted.
        "engine.max_num_seqs=2",
        "sampling=sampled",
        f"sampling.n={SAMPLES}",
        # Short completions: what is checked is which rows and samples exist, not their length. The kill waits for
        # the second chunk written, when the last two chunks (12 requests, run two at a time) are not done yet.
        "sampling.max_tokens=16",
        "tracking=off",
        "engine.warmup=false",
    ]
    layout = RunFolder.for_job(compose_job(args))
    # Killed mid-stream: the second chunk written, later ones in flight or not yet admitted.
    kill_job_group_when(args, layout.part_path(1).exists, "second chunk")
    assert not layout.done_marker.exists()
    written_before = sorted(p.name for p in layout.data_dir.glob("part-*.parquet"))
    assert len(written_before) < N_ROWS // 3

    result = run_generate(args)
    assert result.returncode == 0, result.stderr[-3000:]
    parts = sorted(layout.data_dir.glob("part-*.parquet"))
    assert [p.name for p in parts] == [f"part-{i:05d}.parquet" for i in range(N_ROWS // 3)]
    keys = [(r["row_id"], r["sample_index"]) for p in parts for r in pq.read_table(p).to_pylist()]  # every part opens
    assert sorted(keys) == sorted((f"HumanEval/{i}", s) for i in range(N_ROWS) for s in range(SAMPLES))
    assert not list(layout.data_dir.glob(".*tmp*"))
    assert layout.done_marker.is_file()
    # Only the chunks that were not finished were generated again.
    assert f"in {N_ROWS // 3} chunks, {N_ROWS // 3 - len(written_before)} to generate" in result.stdout + result.stderr
