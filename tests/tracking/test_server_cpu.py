"""The job against a real `mlflow server` on 127.0.0.1 over HTTP (sqlite store, artifacts through the server):
what a run shows, read back with MlflowClient; and the server killed mid-run, then the run logged afterwards.

One server for the module: the last test kills it, and starts it again on the same store."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from conftest import PNG_MAGIC, PROJECT_ROOT, LiveJob, compose_job, run_generate
from mlflow_server import MlflowServer, start_mlflow_server
from specbatch.run.folder import RunFolder

pytestmark = pytest.mark.slow
LOG_RUN = PROJECT_ROOT / "jobs" / "log_run.py"


@pytest.fixture(scope="module")
def tracking_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    """The module's server (its store in its workdir); stopping it after the last test killed it is safe."""
    with start_mlflow_server(tmp_path_factory.mktemp("mlflow-server")) as server:
        yield server


def test_a_run_on_a_tracking_server_shows_everything(tracking_server: MlflowServer, tmp_path: Path) -> None:
    args = [
        "tracking=server",
        "max_samples=3",
        "sampling.max_tokens=32",
        "model.dtype=float32",
        # No warm-up request: no timing figure is checked, and it is ~2 s of the job.
        "engine.warmup=false",
        f"output_root={tmp_path}",
    ]
    # tracking=server takes the URI from MLFLOW_TRACKING_URI, as on a cluster where it is set once for everyone.
    proc = run_generate(args, env={"MLFLOW_TRACKING_URI": tracking_server.uri})
    assert proc.returncode == 0, proc.stderr[-3000:]
    client = MlflowClient(tracking_server.uri)
    experiment = client.get_experiment_by_name("specbatch/humaneval_edit")
    [run] = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == "ngram-k3 · bs3 · smollm2-135m-instruct" and run.info.status == "FINISHED"
    assert "**ngram-k3** on" in run.data.tags["mlflow.note.content"]
    assert run.data.params["spec.method"] == "ngram" and run.data.tags["k"] == "3"
    assert run.data.metrics["mean_acceptance_length"] > 1.0
    history = client.get_metric_history(run.info.run_id, "acceptance_rate_per_position")
    assert sorted(m.step for m in history) == [0, 1, 2]
    [dataset_input] = run.inputs.dataset_inputs
    assert dataset_input.dataset.name == "humaneval_edit"  # named by its data set, not the run folder
    names = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"config.yaml", "summary.json", "completions_sample.json", "acceptance_by_position.png"} <= names
    png = Path(client.download_artifacts(run.info.run_id, "acceptance_by_position.png", str(tmp_path)))
    assert png.read_bytes().startswith(PNG_MAGIC)
    table = json.loads(
        Path(client.download_artifacts(run.info.run_id, "completions_sample.json", str(tmp_path))).read_text()
    )
    assert len(table["data"]) == 3


def test_server_killed_mid_run_then_logged_later(tracking_server: MlflowServer, tmp_path: Path) -> None:
    """Last in the module: it kills the module's server."""
    args = [
        "max_samples=4",
        "model.dtype=float32",
        "chunk_size=1",
        "sampling.max_tokens=48",
        "engine.warmup=false",
        f"output_root={tmp_path}",
        "tracking.http_retries=0",
        "tracking.http_timeout_seconds=5",
    ]
    uri = tracking_server.uri
    job = LiveJob.generate([*args, f"tracking.uri={uri}"])
    job.wait_for("MLflow run ngram-k3", timeout=600)  # the run exists on the server, generation is next
    tracking_server.kill()
    code = job.wait(timeout=900)
    assert code == 0, job.output[-3000:]
    layout = RunFolder.for_job(compose_job([*args, f"tracking.uri={uri}"]))
    assert layout.done_marker.exists() and len(list(layout.data_dir.glob("part-*.parquet"))) == 4
    assert json.loads(layout.stats_path.read_text())["rows"] == 4
    warnings = [line for line in job.output.splitlines() if "MLflow tracking at" in line]
    assert len(warnings) == 1 and uri in warnings[0] and "jobs/log_run.py" in warnings[0]
    pending = json.loads(layout.mlflow_pending_path.read_text())
    assert pending["run_id"]

    with start_mlflow_server(tracking_server.workdir) as again:  # same store, back up (on another port)
        logged = subprocess.run(
            [sys.executable, str(LOG_RUN), str(layout.root), "--tracking-uri", again.uri],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert logged.returncode == 0, logged.stderr[-3000:]
        run = MlflowClient(again.uri).get_run(pending["run_id"])
    assert run.info.status == "FINISHED"
    assert run.data.metrics["output_tokens"] > 0 and run.data.params["spec.method"] == "ngram"
    assert not layout.mlflow_pending_path.exists()
