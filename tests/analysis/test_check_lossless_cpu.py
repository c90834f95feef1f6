"""jobs/check_lossless.py on a real sampled run: vLLM on CPU, n-gram speculation, float32, temperature 0.7 top-p 0.95,
four samples a prompt; the referee finds no difference and says what it could have caught."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from mlflow import MlflowClient

from conftest import compose_job, run_generate
from specbatch.common.environment import PROJECT_ROOT
from specbatch.run.folder import RunFolder

CHECK = PROJECT_ROOT / "jobs" / "check_lossless.py"


def _check(*runs: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHECK), *map(str, runs)], capture_output=True, text=True, timeout=900, cwd=PROJECT_ROOT
    )


def test_a_sampled_speculative_run_is_checked_against_its_own_target(tmp_path: Path) -> None:
    overrides = [
        f"output_root={tmp_path}",
        f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
        "model.dtype=float32",
        "spec=ngram",
        "sampling.temperature=0.7",
        "sampling.top_p=0.95",
        "sampling.n=4",
        "max_samples=8",
        "sampling.max_tokens=48",
    ]
    generated = run_generate(overrides)
    assert generated.returncode == 0, generated.stderr[-3000:]
    root = RunFolder.for_job(compose_job(overrides)).root
    checked = _check(root)
    assert checked.returncode == 0, checked.stdout + checked.stderr[-3000:]
    record = json.loads((root / "lossless" / "lossless.json").read_text())
    assert record["verdict"] in ("consistent", "too few tokens"), record["why"]
    assert record["figures"]["tokens"] > 500 and record["referee"]["samples"] == 32
    # The four samples of a prompt are written one after another: the referee read each prompt once.
    assert record["referee"]["prompts"] == 8
    assert f"{record['verdict']}: " in checked.stdout
    assert sum(record["figures"]["pit_deciles"]) == record["figures"]["tokens"]
    assert (root / "lossless" / "pit.png").read_bytes().startswith(b"\x89PNG")
    # On the run's MLflow run: the tag, the metrics and both files.
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    (run,) = client.search_runs(
        [client.get_experiment_by_name("specbatch/humaneval_edit").experiment_id],
        filter_string=f"tags.run_folder = '{root}'",
    )
    assert run.data.tags["lossless"] == record["verdict"]
    assert run.data.metrics["lossless.tokens"] == record["figures"]["tokens"]
    assert {a.path for a in client.list_artifacts(run.info.run_id, "lossless")} == {
        "lossless/lossless.json",
        "lossless/pit.png",
    }
    # A folder that holds no finished run gets one line and status 2, not a traceback.
    missing = _check(tmp_path / "nothing-here")
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
