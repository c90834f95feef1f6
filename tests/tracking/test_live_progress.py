"""The shard's progress in its MLflow run while it runs: step metrics read from the real store before the run ends,
logged without the job ever waiting for the store, apart from the summary's own metrics."""

from __future__ import annotations

import signal
import sys
import threading
import time
from pathlib import Path

from mlflow.tracking import MlflowClient

from conftest import PROJECT_ROOT, LiveJob
from specbatch.backends.dummy.dummy import DummyEngine, StepCost
from specbatch.engine import engine_fingerprint
from specbatch.pipeline import run_job
from specbatch.run.shard_progress import ShardProgress
from specbatch.tracking.logger import RunLogger

SLOW_DUMMY = PROJECT_ROOT / "tests" / "slow_dummy.py"
CURVE = {
    f"progress/{name}"
    for name in (
        "rows_done",
        "samples_done",
        "fraction_done",
        "output_tokens_per_second",
        "mean_acceptance_length",
        "eta_seconds",
    )
}


def test_the_progress_curve_is_in_the_store_while_the_shard_still_runs(tmp_path: Path) -> None:
    store = tmp_path / "mlflow.db"
    # All 164 rows of the default data set, two at a time, each engine step 0.1 s: minutes, far longer than the test
    # watches it; it is stopped once the curve is seen.
    args = ["engine.backend=dummy", "max_samples=null", "engine.max_num_seqs=2", "sampling.max_tokens=32"]
    args += [f"output_root={tmp_path / 'out'}", f"tracking.uri=sqlite:///{store}", "tracking.experiment=live"]
    args += ["progress.interval_seconds=0.5", "stop_grace_seconds=0"]
    job = LiveJob([sys.executable, str(SLOW_DUMMY), *args], env={"DUMMY_STEP_SECONDS": "0.1"})
    try:
        # The store exists once the job said its run is open (a second client creating it would race the job's).
        job.wait_for("MLflow run ", timeout=300)
        client = MlflowClient(tracking_uri=f"sqlite:///{store}")
        [run] = client.search_runs([client.get_experiment_by_name("live").experiment_id])
        deadline = time.monotonic() + 300
        while len({point.step for point in client.get_metric_history(run.info.run_id, "progress/rows_done")}) < 2:
            assert job.process.poll() is None, f"the job ended before its curve had two points:\n{job.output[-3000:]}"
            assert time.monotonic() < deadline, f"no two progress points within 300 s:\n{job.output[-3000:]}"
            time.sleep(0.2)
        running = client.get_run(run.info.run_id)
        assert job.process.poll() is None
    finally:
        job.signal_group(signal.SIGTERM)
        job.process.wait(timeout=300)
    # Seen while the run was open, before any summary metric: only the curve's, stepped by the rows done.
    assert running.info.status == "RUNNING"
    assert set(running.data.metrics) == CURVE, running.data.metrics
    history = client.get_metric_history(run.info.run_id, "progress/rows_done")
    assert all(point.step == point.value for point in history) and max(p.step for p in history) < 164
    fractions = client.get_metric_history(run.info.run_id, "progress/fraction_done")
    assert {(p.step, round(p.value, 6)) for p in fractions} == {(p.step, round(p.step / 164, 6)) for p in history}
    assert job.process.returncode == 143, job.output[-3000:]
    assert client.get_run(run.info.run_id).info.status == "KILLED"


class WaitsForTheStore(DummyEngine):
    """Steps on only once the store holds the job's first progress report in hand (so it is stalled there)."""

    def __init__(self, job, taken: threading.Event) -> None:
        super().__init__(engine_fingerprint(job), k=job.spec.k, concurrency=2, step_cost=StepCost(0.001))
        self.taken, self.steps = taken, 0

    def step(self):  # type: ignore[no-untyped-def]
        self.steps += 1
        if self.steps > 1:
            assert self.taken.wait(60), "the first progress report never reached the store"
        return super().step()


def test_a_stalled_store_never_holds_the_job_and_gets_the_newest_figures(job_factory, monkeypatch) -> None:
    job = job_factory("max_samples=12", "progress.interval_seconds=0.001", "tracking.experiment=stalled")
    taken, ended = threading.Event(), threading.Event()
    logged: list[list[tuple[str, float, int]]] = []
    waited: list[bool] = []
    real_log, real_close = RunLogger.log_stepped_metrics, ShardProgress.close

    def stalled(self: RunLogger, metrics: list[tuple[str, float, int]]) -> None:
        logged.append(metrics)
        if len(logged) == 1:
            taken.set()
            # The store answers the first report only once the shard's generation is over.
            waited.append(ended.wait(60))
        real_log(self, metrics)

    def close(self: ShardProgress) -> None:
        real_close(self)
        ended.set()

    monkeypatch.setattr(RunLogger, "log_stepped_metrics", stalled)
    monkeypatch.setattr(ShardProgress, "close", close)
    result = run_job(job, engine=WaitsForTheStore(job, taken))
    # The whole generation ran while the store held its first report; of the hundreds of reports sent meanwhile,
    # none queued behind it but the newest, the shard's end.
    assert waited == [True] and len(logged) == 2
    [first, last] = [{name: (value, step) for name, value, step in metrics} for metrics in logged]
    assert first["progress/rows_done"][0] < 12 and last["progress/rows_done"] == (12, 12)
    client = MlflowClient(tracking_uri=job.tracking.uri)
    [run] = client.search_runs([client.get_experiment_by_name("stalled").experiment_id])
    assert run.info.status == "FINISHED"
    # The summary's metrics keep their names and values; the curve's are apart.
    assert run.data.metrics["output_tokens"] == result.summary.output_tokens
    assert run.data.metrics["output_tokens_per_second"] == result.summary.output_tokens_per_second
    assert CURVE <= set(run.data.metrics)
