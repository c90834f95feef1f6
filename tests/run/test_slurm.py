"""A real single-node Slurm (jobs/slurm/cluster.sh): 2-task arrays through plain sbatch and through Hydra's
submitit launcher, then merge. Every input row exactly once; the merged summary is the sum of the shards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import GENERATE, PROJECT_ROOT, compose_job
from specbatch.pipeline import merge_run
from specbatch.run.folder import RunFolder
from specbatch.run.status_merge import run_status
from specbatch.run.summary import Summary

pytestmark = pytest.mark.slow

N_ROWS = 4
CLUSTER = PROJECT_ROOT / "jobs" / "slurm" / "cluster.sh"
SBATCH_SCRIPT = PROJECT_ROOT / "jobs" / "slurm" / "generate.sbatch"


@pytest.fixture(scope="module")
def slurm_env() -> Iterator[dict[str, str]]:
    if os.geteuid() != 0 and subprocess.run(["which", "slurmctld"], capture_output=True).returncode != 0:
        pytest.fail("Slurm is not installed and these tests need root to install it: run `make test` as root")
    up = subprocess.run(["bash", str(CLUSTER), "up"], capture_output=True, text=True, timeout=900)
    assert up.returncode == 0, up.stderr
    env = {**os.environ, "SLURM_CONF": up.stdout.strip().splitlines()[-1], "PYTHONUNBUFFERED": "1"}
    yield env
    subprocess.run(["bash", str(CLUSTER), "down"], capture_output=True, text=True, timeout=120)


def job_args(root: Path) -> list[str]:
    return [
        f"output_root={root}",
        f"max_samples={N_ROWS}",
        "sampling.max_tokens=24",
        "tracking=off",
        "model.dtype=float32",
        # Nothing here reads a timing or races a signal: no warm-up request in any of the 4 tasks.
        "engine.warmup=false",
    ]


# Where a job's state ends (scontrol's JobState).
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL"}


def wait_for_array(job_id: str, env: dict[str, str], tasks: int, timeout: float = 1500) -> dict[str, tuple[str, str]]:
    """Wait until every task of array job ``job_id`` has ended; {task id: (JobState, ExitCode)}. Polled every half
    second with scontrol (slurmctld keeps ended jobs for MinJobAge, 300 s): `sbatch --wait` polls at growing
    intervals, and its last poll came up to half a minute after the tasks ended (74 s for a 40 s array)."""
    deadline = time.monotonic() + timeout
    while True:
        shown = subprocess.run(
            ["scontrol", "--oneliner", "show", "job", job_id], env=env, capture_output=True, text=True, timeout=60
        )
        records = [
            dict(word.split("=", 1) for word in line.split() if "=" in word) for line in shown.stdout.splitlines()
        ]
        states = {r.get("ArrayTaskId", ""): (r.get("JobState", ""), r.get("ExitCode", "")) for r in records}
        if len(states) == tasks and all(state in ENDED for state, _ in states.values()):
            return states
        assert time.monotonic() < deadline, f"array job {job_id} has not ended in {timeout:.0f} s: {states}"
        time.sleep(0.5)


def check_merged(root_args: list[str], shards: int) -> None:
    layout = RunFolder.for_job(compose_job(root_args), 0, shards)
    assert [s.state for s in run_status(layout.root)] == ["done"] * shards
    result = merge_run(layout.root, log_to_mlflow=False)
    ids = [r["row_id"] for p in result.parts for r in pq.read_table(p).to_pylist()]
    assert sorted(ids) == sorted(f"HumanEval/{i}" for i in range(N_ROWS)) and len(ids) == N_ROWS
    shard_summaries = [
        Summary(**json.loads(RunFolder(layout.root, i, shards).stats_path.read_text())) for i in range(shards)
    ]
    for key in ("rows", "output_tokens", "prompt_tokens", "drafts", "accepted_tokens"):
        assert getattr(result.summary, key) == sum(getattr(s, key) for s in shard_summaries), key


def test_plain_sbatch_array_then_merge(slurm_env: dict[str, str], tmp_path: Path) -> None:
    logs = tmp_path / "slurm-logs"
    logs.mkdir()
    submit = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--array=0-1",
            "--cpus-per-task=1",
            "--mem=6G",
            "--time=30",
            f"--output={logs}/%A_%a.out",
            str(SBATCH_SCRIPT),
            *job_args(tmp_path),
        ],
        cwd=PROJECT_ROOT,
        env={**slurm_env, "SPECBATCH_PYTHON": sys.executable, "SPECBATCH_HOME": str(PROJECT_ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert submit.returncode == 0, submit.stderr
    ended = wait_for_array(submit.stdout.strip().split(";")[0], slurm_env, tasks=2)
    task_logs = "\n".join(p.read_text()[-3000:] for p in sorted(logs.glob("*.out")))
    assert set(ended.values()) == {("COMPLETED", "0:0")}, f"{ended}\n{task_logs}"
    assert "shard 0/2" in task_logs and "shard 1/2" in task_logs  # each task took its shard from the array
    check_merged(job_args(tmp_path), 2)


def test_submitit_launcher_array_then_merge(slurm_env: dict[str, str], tmp_path: Path) -> None:
    launch = subprocess.run(
        [
            sys.executable,
            str(GENERATE),
            "-m",
            "hydra/launcher=slurm_cpu",
            "shard.count=2",
            "shard.index=range(0,2)",
            "hydra.launcher.cpus_per_task=1",
            "hydra.launcher.mem_gb=6",
            "hydra.launcher.timeout_min=30",
            *job_args(tmp_path),
        ],
        cwd=PROJECT_ROOT,
        env=slurm_env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert launch.returncode == 0, launch.stdout[-3000:] + launch.stderr[-3000:]
    check_merged(job_args(tmp_path), 2)
