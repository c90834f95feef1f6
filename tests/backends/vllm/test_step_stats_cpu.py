"""The offline vLLM engine's step load for real (embedded SmolLM2, float32, n-gram k 3 at every batch size, 4
requests at once): the job's steps file holds every step that ran, and its figures add up to the rows' and vLLM's own
counters; and the running engine's k per batch size changes in place (Engine.set_k_schedule), which spec=auto's
switch back uses instead of a new engine. One engine for the module."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import compose_job
from specbatch.engine import Request, start_engine
from specbatch.engine.spec_metrics import Counters
from specbatch.pipeline import run_job
from specbatch.run.records.steps_file import read_all_steps

pytestmark = pytest.mark.slow

ROWS, BATCH = 12, 4


def _job(root: Path):
    return compose_job(
        [
            "spec=ngram",
            # One k everywhere, given as a schedule: vLLM then keeps the per-batch-size list set_k_schedule rewrites.
            f"spec.k_schedule=[[1,{BATCH},3]]",
            "model.dtype=float32",
            f"max_samples={ROWS}",
            "sampling.max_tokens=24",
            f"engine.max_num_seqs={BATCH}",
            "chunk_size=6",
            # Nothing here compares timings: no warm-up request.
            "engine.warmup=false",
            "tracking=off",
            f"output_root={root}",
        ]
    )


@pytest.fixture(scope="module")
def started(tmp_path_factory):
    job = _job(tmp_path_factory.mktemp("steps"))
    engine = start_engine(job)
    try:
        yield job, engine, run_job(job, engine=engine)
    finally:
        engine.close()


def test_the_steps_file_adds_up_to_the_rows_and_the_counters(started) -> None:
    job, engine, result = started
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


def _drafts_of(engine, prompts: list[list[int]], job) -> list[int]:
    """Draft tokens of each step while ``prompts`` run to the end."""
    for n, ids in enumerate(prompts):
        engine.add(Request(f"live-{n}", 1, ids, job.sampling))
    drafts = []
    while engine.unfinished:
        engine.step()
        drafts.append(engine.last_step.draft_tokens if engine.last_step else 0)
    return drafts


def test_the_running_engines_k_changes_in_place(started) -> None:
    job, engine, _ = started
    # Prompts that repeat themselves, so that n-gram drafts at every step it may.
    prompts = [[101, 102, 103, 104, 105] * 8 for _ in range(BATCH)]
    assert engine.set_k_schedule([[1, BATCH, 0]])
    assert sum(_drafts_of(engine, prompts, job)) == 0, "k 0 at every batch size: nothing drafted"
    assert engine.set_k_schedule([[1, BATCH, 3]])
    assert sum(_drafts_of(engine, prompts, job)) > 0, "back to k 3: drafting again, same engine"
