"""A real sweep (`jobs/generate.py -m spec=none,ngram`, float32, real vLLM) compared by jobs/compare.py:
nested MLflow runs read back with MlflowClient, equality 1.0, speedup from the stored timings, plots."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from conftest import PNG_MAGIC, PROJECT_ROOT, run_generate

pytestmark = pytest.mark.slow
COMPARE = PROJECT_ROOT / "jobs" / "compare.py"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("sweep")
    sweep_dir = root / "sweep"
    uri = f"sqlite:///{root}/mlflow.db"
    proc = run_generate(
        [
            "-m",
            "spec=none,ngram",
            "model.dtype=float32",
            "max_samples=3",
            "sampling.max_tokens=32",
            # The speedup asserted is the ratio of the stored throughputs, whatever they are: no warm-up request
            # (~2 s an engine) is needed for it.
            "engine.warmup=false",
            f"output_root={root}",
            f"hydra.sweep.dir={sweep_dir}",
            "tracking.experiment=sweep-test",
        ]
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"root": root, "dir": sweep_dir, "uri": uri}


def compare(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(COMPARE), *args], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300
    )


def test_sweep_is_one_parent_run_with_a_tagged_child_per_job(sweep: dict) -> None:
    client = MlflowClient(sweep["uri"])
    experiment = client.get_experiment_by_name("sweep-test")
    runs = client.search_runs([experiment.experiment_id])
    [parent] = [r for r in runs if r.data.tags.get("specbatch.kind") == "sweep"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(runs) == 3 and len(children) == 2
    assert parent.info.status == "FINISHED" and parent.data.tags["sweep.jobs"] == "2"
    assert "spec=none,ngram" in parent.data.tags["sweep.overrides"]
    choices = sorted((c.data.tags["override.spec"], c.data.tags["method"], c.data.tags["k"]) for c in children)
    assert choices == [("ngram", "ngram", "3"), ("none", "none", "none")]
    for child in children:
        assert child.data.tags["override.model.dtype"] == "float32"
        assert child.data.tags["sweep_dir"] == str(sweep["dir"].resolve())
        assert "output_tokens_per_second" in child.data.metrics


def test_compare_on_the_sweep_folder(sweep: dict) -> None:
    proc = compare(str(sweep["dir"]))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = sweep["dir"] / "comparison"
    data = json.loads((out / "comparison.json").read_text())
    rows = {r["method"]: r for r in data["rows"]}
    assert rows["ngram"]["identical_share"] == 1.0 and rows["ngram"]["rows_compared"] == 3
    # The speedup is the ratio of the throughputs stored with each run (output tokens / generation seconds).
    stored = {}
    for method, row in rows.items():
        [stats] = Path(row["run_folders"][0]).glob("stats/shard-*.json")
        summary = json.loads(stats.read_text())
        stored[method] = summary["output_tokens"] / summary["generation_seconds"]
    assert rows["ngram"]["speedup"] == pytest.approx(stored["ngram"] / stored["none"])
    assert "| ngram | 3 | 1 |" in proc.stdout and "greedy equality compared in float32" in proc.stdout
    for name in ["acceptance_by_position.png", "speedup_vs_k.png", "throughput_vs_batch_size.png"]:
        png = (out / name).read_bytes()
        assert png.startswith(PNG_MAGIC) and len(png) > 5000, name
    for name in ["comparison.csv", "comparison.parquet"]:
        assert (out / name).stat().st_size > 0
    # Logged to the sweep's parent run: metrics, recommendation tag, files and plots as artifacts.
    client = MlflowClient(sweep["uri"])
    parent_id = json.loads((sweep["dir"] / "sweep.json").read_text())["parent_run_id"]
    parent = client.get_run(parent_id)
    # A handful of metrics on the parent: the recommended speedup stepped by batch size, and the runs compared.
    assert set(parent.data.metrics) == {"best_speedup", "runs_compared"} and parent.data.metrics["runs_compared"] == 2
    [best] = client.get_metric_history(parent_id, "best_speedup")
    assert best.step == 3
    assert parent.data.tags["recommended.bs3"] in ("ngram k=3", "none")
    # The per-run figures sit on each child under the same names, so MLflow's charts draw one bar per run.
    children = {
        c.data.tags["method"]: c
        for c in client.search_runs([parent.info.experiment_id], f"tags.mlflow.parentRunId = '{parent_id}'")
    }
    ngram, none = children["ngram"], children["none"]
    assert ngram.data.metrics["against_none/speedup"] == pytest.approx(rows["ngram"]["speedup"])
    assert ngram.data.metrics["against_none/identical_share"] == 1.0
    assert "against_none/identical_share" not in none.data.metrics
    assert none.data.metrics["against_none/speedup"] == pytest.approx(1.0)
    assert ngram.data.tags["baseline_run_id"] == none.info.run_id == none.data.tags["baseline_run_id"]
    assert ngram.data.tags["baseline_run_folder"] == rows["none"]["run_folders"][0]
    # Names lead with what differs; the parent says what was swept.
    assert ngram.info.run_name == "ngram-k3 · bs3 · smollm2-135m-instruct"
    assert parent.info.run_name == "sweep spec=none,ngram"
    logged = {Path(a.path).name for a in client.list_artifacts(parent_id, "comparison")}
    assert {"comparison.json", "speedup_vs_k.png", "acceptance_by_position.png"} <= logged


def test_compare_by_mlflow_parent_run_finds_the_same_runs(sweep: dict, tmp_path: Path) -> None:
    parent_id = json.loads((sweep["dir"] / "sweep.json").read_text())["parent_run_id"]
    proc = compare("--mlflow-run", parent_id, "--tracking-uri", sweep["uri"], "--out", str(tmp_path), "--no-mlflow")
    assert proc.returncode == 0, proc.stderr[-3000:]
    methods = sorted(r["method"] for r in json.loads((tmp_path / "comparison.json").read_text())["rows"])
    assert methods == ["ngram", "none"]


def test_compare_without_baseline_fails_clearly(sweep: dict) -> None:
    ngram = [p for p in (sweep["root"] / "runs").glob("*/*/ngram-*")]
    proc = compare(*map(str, ngram), "--no-mlflow")
    assert proc.returncode == 2
    assert "add spec=none to the sweep" in proc.stderr and "Traceback" not in proc.stderr
