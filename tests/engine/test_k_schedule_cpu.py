"""spec.k_schedule for real on CPU: vLLM drafts the schedule's k for the batch size it runs at, not the largest k, and
jobs/compare.py reads the run back as a schedule.

ngram with the schedule [[1,1,2],[2,256,4]] at engine.max_num_seqs=1: every step runs one request, so the schedule
says k=2 while num_speculative_tokens (its largest k) is 4. The per-request histograms are sized by the largest k
(vLLM's RequestSpecDecodeMetrics: length num_spec_tokens + 1), so what shows the k used is that no step accepted
more than 2 drafts and that no step drafted more than 2 tokens (draft_tokens <= 2 x spec_steps).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import run_generate
from specbatch.analysis.report import find_runs, recorded_job, run_compare, serve_commands
from specbatch.analysis.tables import format_comparison
from specbatch.backends.vllm.serve_commands import vllm_serve_command
from specbatch.run.folder import read_run
from specbatch.run.multirun import sweep_jobs

pytestmark = pytest.mark.slow

SCHEDULE = "spec.k_schedule=[[1,1,2],[2,256,4]]"
K_AT_BATCH_1, LARGEST_K = 2, 4
COMMON = [
    "model.dtype=float32",
    "max_samples=3",
    # Enough for the figures below (at 96, 48 and 32 every row drafted exactly 2 per step and each row had steps
    # accepting both; the shortest row ends on its own at 27 tokens).
    "sampling.max_tokens=32",
    "engine.max_num_seqs=1",
    "tracking=off",
    # Nothing here compares timings (compare's speedup only has to exist): no warm-up request per engine.
    "engine.warmup=false",
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    # One multirun, as a user measures a schedule against its baseline: both jobs in one process (one process start
    # fewer), the schedule dropped for spec=none (a swept knob that means nothing to a method is not refused).
    root = tmp_path_factory.mktemp("k_schedule")
    sweep_dir = root / "sweep"
    overrides = ["-m", "spec=none,ngram", SCHEDULE, f"output_root={root}", f"hydra.sweep.dir={sweep_dir}", *COMMON]
    result = run_generate(overrides)
    assert result.returncode == 0, result.stderr[-4000:]
    jobs = sweep_jobs(sweep_dir)
    assert [failed for _, failed in jobs] == [None, None]
    return {"none": jobs[0][0], "scheduled": jobs[1][0]}


def test_the_k_of_the_batch_size_is_drafted_not_the_largest(runs: dict[str, Path]) -> None:
    folder = runs["scheduled"]
    assert folder.name.startswith("ngram-sched-1to1k2-2to256k4-")
    run = json.loads((folder / "run.json").read_text())
    assert run["config"]["spec"]["k_schedule"] == [[1, 1, 2], [2, 256, 4]]
    assert run["config"]["spec"]["num_speculative_tokens"] == LARGEST_K
    rows = [r for part in sorted((folder / "data").rglob("*.parquet")) for r in pq.read_table(part).to_pylist()]
    assert len(rows) == 3 and all(r["status"] == "ok" for r in rows)
    steps = sum(r["spec_steps"] for r in rows)
    drafted = sum(r["draft_tokens"] for r in rows)
    assert steps > 0
    for r in rows:
        histogram = r["acceptance_histogram"]
        assert r["num_speculative_tokens"] == LARGEST_K and len(histogram) == LARGEST_K + 1
        # No step accepted (or drafted) more than the schedule's k at batch size 1.
        assert histogram[K_AT_BATCH_1 + 1 :] == [0] * (LARGEST_K - K_AT_BATCH_1), r["row_id"]
        assert r["draft_tokens"] <= K_AT_BATCH_1 * r["spec_steps"], r["row_id"]
    # n-gram drafts the full k unless the match runs into the end of the context: nearly every step drafted 2.
    assert drafted >= 0.9 * K_AT_BATCH_1 * steps
    # And the drafts did work: some steps accepted both.
    assert sum(r["acceptance_histogram"][K_AT_BATCH_1] for r in rows) > 0
    summary = json.loads(next((folder / "stats").glob("shard-*.json")).read_text())
    assert summary["acceptance_rate_per_position"][K_AT_BATCH_1:] == [0.0] * (LARGEST_K - K_AT_BATCH_1)


def test_compare_reads_the_run_back_as_a_schedule(runs: dict[str, Path], tmp_path: Path) -> None:
    result = run_compare(find_runs(list(runs.values())), tmp_path, log_to_mlflow=False)
    rows = {r.method: r for r in result.comparison.rows}
    assert set(rows) == {"none", "ngram"}
    scheduled = rows["ngram"]
    assert scheduled.k_schedule == [[1, 1, 2], [2, 256, 4]] and scheduled.k == LARGEST_K
    assert scheduled.batch_size == 1 and scheduled.speedup is not None
    # Greedy float32: the schedule changes how many tokens are drafted, never which tokens come out.
    assert scheduled.identical_rows == scheduled.rows_compared == 3
    assert "| ngram | schedule 1-1:2 2-256:4 |" in format_comparison(result.comparison)
    written = json.loads((tmp_path / "comparison.json").read_text())
    assert [r["k_schedule"] for r in written["rows"]] == [None, [[1, 1, 2], [2, 256, 4]]]
    # A schedule is never the pick for one batch size (compare writes schedules from fixed-k picks): with no fixed k
    # measured there is nothing to recommend.
    assert result.comparison.recommendations == [] and serve_commands(result.comparison) == []
    # Serving the scheduled run's recorded config carries the schedule to vLLM's server.
    job = recorded_job(read_run(Path(scheduled.run_folders[0]))["config"])
    line = vllm_serve_command(job, module=True)
    assert '"num_speculative_tokens_per_batch_size": [[1, 1, 2], [2, 256, 4]]' in line
