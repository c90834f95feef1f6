"""MLflow logging of one run: params = the flattened resolved config, metrics = the summary, plus artifacts and tags.

Uses an explicit ``MlflowClient`` rather than mlflow's global active run, so several jobs in one process (tests,
sweeps) never log into each other's runs.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from specbatch.config import TrackingConfig
from specbatch.summary import Summary

log = logging.getLogger(__name__)

# MLflow limits: params and metrics per log_batch call, and characters per param value.
PARAMS_PER_BATCH = 100
METRICS_PER_BATCH = 1000
MAX_PARAM_CHARS = 6000


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """``{"model": {"path": p}}`` → ``{"model.path": "p"}``; None becomes "null" so unset keys stay visible."""
    flat: dict[str, str] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, f"{name}."))
        else:
            text = "null" if value is None else str(value)
            flat[name] = text if len(text) <= MAX_PARAM_CHARS else text[: MAX_PARAM_CHARS - 3] + "..."
    return flat


def metric_safe(name: str) -> str:
    """A name part safe inside a metric name: letters, digits, _ - . and spaces; anything else (/ too) becomes _."""
    return re.sub(r"[^A-Za-z0-9_\-. ]", "_", name) or "_"


def _sqlite_db(uri: str) -> Path | None:
    """The database file of a sqlite:/// store URI, or None for any other store."""
    return Path(uri[len("sqlite:///") :]).resolve() if uri.startswith("sqlite:///") else None


def default_artifact_location(uri: str) -> str | None:
    """For a sqlite store, keep artifacts beside the database instead of in ./mlruns of whatever the cwd is."""
    db = _sqlite_db(uri)
    return (db.parent / "mlartifacts").as_uri() if db else None


def _prepare_store(uri: str) -> None:
    db = _sqlite_db(uri)
    if db:
        db.parent.mkdir(parents=True, exist_ok=True)


class RunLogger:
    """Logging calls for one open MLflow run."""

    def __init__(self, client: Any, run_id: str, experiment_id: str) -> None:
        self.client = client
        self.run_id = run_id
        self.experiment_id = experiment_id

    def log_params(self, params: dict[str, str]) -> None:
        from mlflow.entities import Param

        items = [Param(k, v) for k, v in sorted(params.items())]
        for start in range(0, len(items), PARAMS_PER_BATCH):
            self.client.log_batch(self.run_id, params=items[start : start + PARAMS_PER_BATCH])

    def log_summary(self, summary: Summary) -> None:
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now, 0) for k, v in summary.scalar_metrics().items()]
        # One metric stepped by draft position (0 = first drafted token), so the UI draws the acceptance curve.
        for position, rate in enumerate(summary.acceptance_rate_per_position or []):
            metrics.append(Metric("acceptance_rate_per_position", rate, now, position))
        for category, figures in (summary.per_category or {}).items():
            name = metric_safe(category)
            metrics += [Metric(f"category/{name}/{k}", float(v), now, 0) for k, v in figures.items()]
        self.client.log_batch(self.run_id, metrics=metrics)

    def log_text(self, text: str, artifact_file: str) -> None:
        self.client.log_text(self.run_id, text, artifact_file)

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        self.client.log_artifact(self.run_id, str(path), artifact_path)

    def log_metrics(self, metrics: dict[str, float]) -> None:
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(k, float(v), now, 0) for k, v in sorted(metrics.items())]
        for start in range(0, len(items), METRICS_PER_BATCH):
            self.client.log_batch(self.run_id, metrics=items[start : start + METRICS_PER_BATCH])


def open_client(cfg: TrackingConfig) -> tuple[Any, str]:
    """An ``MlflowClient`` on the configured store and the id of the configured experiment (created if needed)."""
    from mlflow.tracking import MlflowClient

    _prepare_store(cfg.uri)
    client = MlflowClient(tracking_uri=cfg.uri)
    experiment = client.get_experiment_by_name(cfg.experiment)
    if experiment is not None:
        return client, experiment.experiment_id
    location = cfg.artifact_location or default_artifact_location(cfg.uri)
    return client, client.create_experiment(cfg.experiment, artifact_location=location)


@contextlib.contextmanager
def mlflow_run(
    cfg: TrackingConfig,
    run_name: str,
    tags: dict[str, str],
    description: str,
    parent_run_id: str | None = None,
) -> Iterator[RunLogger | None]:
    """An MLflow run that ends FINISHED, or FAILED when the body raises (the exception still propagates).

    With ``parent_run_id`` (a sweep's parent run) the run is nested under it in the UI.
    Yields None when tracking is off, so callers write ``if run: ...``.
    """
    if not cfg.enabled:
        yield None
        return
    client, experiment_id = open_client(cfg)
    tags = {**tags, "mlflow.note.content": description}
    if parent_run_id:
        tags["mlflow.parentRunId"] = parent_run_id
    run = client.create_run(experiment_id, run_name=run_name, tags=tags)
    run_id = run.info.run_id
    log.info("MLflow run %s (%s) in experiment %r at %s", run_name, run_id, cfg.experiment, cfg.uri)
    try:
        yield RunLogger(client, run_id, experiment_id)
    except BaseException:
        client.set_terminated(run_id, status="FAILED")
        raise
    client.set_terminated(run_id, status="FINISHED")
