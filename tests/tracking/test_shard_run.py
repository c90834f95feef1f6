"""The MLflow observer opens its run on a worker thread while the job goes on (the chunks generate meanwhile), and
still ends it with the job: what the worker failed at stops the job before the shard is marked done."""

from __future__ import annotations

import threading

import pytest
from mlflow.tracking import MlflowClient

from specbatch.backends.dummy.dummy import DummyEngine
from specbatch.engine import Request, engine_fingerprint
from specbatch.pipeline import run_job
from specbatch.run.folder import RunFolder
from specbatch.tracking import shard_run


class GatedEngine(DummyEngine):
    """Notes, at its first request, whether the MLflow store was still being opened; then lets it open."""

    def __init__(self, job, opening: threading.Event, allow: threading.Event) -> None:
        super().__init__(engine_fingerprint(job), k=job.spec.k)
        self.opening, self.allow = opening, allow
        self.store_busy_at_first_request: bool | None = None

    def add(self, request: Request) -> None:
        if self.store_busy_at_first_request is None:
            self.store_busy_at_first_request = self.opening.wait(30) and not self.allow.is_set()
            self.allow.set()
        super().add(request)


def test_generation_goes_on_while_the_mlflow_run_is_created(job_factory, monkeypatch) -> None:
    job = job_factory("max_samples=3", "tracking.experiment=overlap")
    opening, allow, threads = threading.Event(), threading.Event(), []
    real_client = shard_run.new_client

    def slow_client(cfg):
        threads.append(threading.current_thread())
        opening.set()
        assert allow.wait(30), "the job waited for MLflow before generating"
        return real_client(cfg)

    # The client of the shard's run is made on the observer's thread (from on_locked, beside the engine's start).
    monkeypatch.setattr(shard_run, "new_client", slow_client)
    engine = GatedEngine(job, opening, allow)
    result = run_job(job, engine=engine)

    # The first request reached the engine while the store was still being opened, on another thread.
    assert engine.store_busy_at_first_request is True
    assert threads and all(t is not threading.main_thread() for t in threads)
    # ... and the run still got everything, and ended with the shard.
    folder = RunFolder.for_job(job)
    assert result.generated and folder.is_done() and not folder.mlflow_active_path.exists()
    client = MlflowClient(tracking_uri=job.tracking.uri)
    [run] = client.search_runs([client.get_experiment_by_name("overlap").experiment_id])
    assert run.info.status == "FINISHED"
    assert run.data.params["spec.method"] == "ngram"
    assert run.data.metrics["output_tokens"] == result.summary.output_tokens > 0


def test_a_failure_while_opening_the_run_stops_the_job_before_the_done_marker(job_factory, monkeypatch) -> None:
    job = job_factory("max_samples=2", "tracking.experiment=broken-record")

    def disk_full(path, data) -> None:
        raise OSError(28, "No space left on device", str(path))

    # Writing the run's id into the run folder is the worker's only write that can fail the job.
    monkeypatch.setattr(shard_run, "write_note", disk_full)
    with pytest.raises(OSError, match="No space left"):
        run_job(job, engine=DummyEngine(engine_fingerprint(job), k=job.spec.k))
    folder = RunFolder.for_job(job)
    assert not folder.is_done()
    client = MlflowClient(tracking_uri=job.tracking.uri)
    [run] = client.search_runs([client.get_experiment_by_name("broken-record").experiment_id])
    assert run.info.status == "FAILED"
    # The parts are kept: a rerun with room on the disk only finishes the bookkeeping.
    monkeypatch.undo()
    again = run_job(job, engine=DummyEngine(engine_fingerprint(job), k=job.spec.k))
    assert folder.is_done() and not again.generated and again.summary.rows == 2
