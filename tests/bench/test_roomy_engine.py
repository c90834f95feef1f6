"""The roomy-engine bench (specbatch.bench.roomy_engine) composes its three set-ups as the job reads them and reports
the full batch's steps (no vLLM)."""

from __future__ import annotations

import argparse

from specbatch.bench.roomy_engine import report, variants
from specbatch.config import compose_job
from specbatch.run.step_log import bucket_label, bucket_of


def test_the_roomy_set_up_is_started_at_the_room_and_runs_the_k_at_every_batch_size_of_the_job() -> None:
    setups = variants(k=2, room=8, batch=16)
    jobs = {name: compose_job([*overrides, "engine.max_num_seqs=16"]) for name, overrides in setups.items()}
    assert jobs["plain"].spec.k == 2 and jobs["plain"].spec.k_schedule is None
    assert jobs["schedule"].spec.k == 2 and jobs["schedule"].spec.k_schedule == [[1, 16, 2]]
    # Started at k 8 (vLLM's largest), which no batch size of the job reaches: as spec=auto's engines start.
    assert jobs["roomy"].spec.k == 8 and jobs["roomy"].spec.k_schedule == [[1, 16, 2], [17, 17, 8]]


def test_the_full_batch_bucket_and_the_report_compare_each_set_up_with_the_plain_engine() -> None:
    # The bucket the bench reads a batch of 16 from, as the step log labels it.
    assert bucket_label(bucket_of(16)) == "16-31" and bucket_label(bucket_of(15)) == "8-15"
    run = {"wall": 80.0, "tok_s": 60.0, "steps": 276.0, "batch_steps": 217.0, "tokens": 5097.0}
    figures = {
        "plain": [run | {"batch_ms": 270.0}, run | {"batch_ms": 280.0}, run | {"batch_ms": 290.0}],
        "schedule": [run | {"batch_ms": 280.0}] * 3,
        "roomy": [run | {"batch_ms": 308.0}] * 3,
    }
    args = argparse.Namespace(rows=160, workload="retrieval", max_tokens=64, batch=16, k=2, room=8, rounds=3)
    text = report(args, figures)
    assert text.splitlines()[1].startswith("machine: ")
    assert "| plain | 270.0, 280.0, 290.0 | 280.0 | 1.000 | 276 (217) | 5097 | 60.0 |" in text
    assert "| roomy | 308.0, 308.0, 308.0 | 308.0 | 1.100 |" in text
