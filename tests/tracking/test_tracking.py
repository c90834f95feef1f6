"""MLflow logging around a job, with a fake engine (logic only): a failure ends the run FAILED and propagates."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from specbatch.backends.dummy.dummy import DummyEngine
from specbatch.engine import Completion, engine_fingerprint
from specbatch.pipeline import run_job
from specbatch.run.folder import RunFolder
from specbatch.tracking import store
from specbatch.tracking.logger import flatten
from specbatch.tracking.store import default_artifact_location


class ExplodingEngine(DummyEngine):
    """Takes requests, then fails at its first step like an engine crash would."""

    def step(self) -> list[Completion]:
        raise RuntimeError("engine died mid-batch")


def exploding(job) -> ExplodingEngine:
    return ExplodingEngine(engine_fingerprint(job))


def test_failure_marks_the_run_failed_and_propagates(job_factory, tmp_path: Path) -> None:
    job = job_factory("max_samples=2", "tracking.experiment=failing")
    engine = exploding(job)
    with pytest.raises(RuntimeError, match="engine died mid-batch"):
        run_job(job, engine=engine)
    client = MlflowClient(tracking_uri=job.tracking.uri)
    [run] = client.search_runs([client.get_experiment_by_name("failing").experiment_id])
    assert run.info.status == "FAILED"
    assert run.data.params["spec.method"] == "ngram"  # params were logged before the failure
    layout = RunFolder.for_job(job)
    assert not layout.done_marker.exists()
    assert not list(layout.root.rglob("*.parquet"))


def test_engine_built_for_another_config_is_refused(job_factory) -> None:
    job = job_factory("max_samples=1")
    other = exploding(job_factory("spec=none"))
    with pytest.raises(ValueError, match="built for another model/spec/engine config"):
        run_job(job, engine=other)


def test_tracking_off_logs_nothing(job_factory, tmp_path: Path, monkeypatch) -> None:
    # tracking=off has uri none://, where a client fails anyway and the tolerant logger hides it: only a record of
    # every client the job asks for shows that it asked for none.
    opened: list[str] = []

    def no_client(cfg):
        opened.append(cfg.uri)
        raise AssertionError(f"tracking=off opened an MLflow client on {cfg.uri}")

    monkeypatch.setattr(store, "new_client", no_client)
    job = job_factory("max_samples=1", "tracking=off")
    with pytest.raises(RuntimeError):
        run_job(job, engine=exploding(job))
    assert opened == []
    assert not (tmp_path / "outputs" / "mlflow.db").exists()


def test_flatten_and_artifact_location() -> None:
    assert flatten({"a": {"b": 1, "c": None}, "d": "x" * 7000}) == {"a.b": "1", "a.c": "null", "d": "x" * 5997 + "..."}
    assert default_artifact_location("sqlite:////tmp/x/mlflow.db") == "file:///tmp/x/mlartifacts"
    assert default_artifact_location("http://127.0.0.1:5000") is None
