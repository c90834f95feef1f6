"""MLflow logging of one run: params = the flattened resolved config, metrics = the summary, plus artifacts and tags.

Uses an explicit ``MlflowClient`` rather than mlflow's global active run, so several jobs in one process (tests,
sweeps) never log into each other's runs.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from specbatch.common.interrupts import StopRequested
from specbatch.common.masking import mask_text, mask_uri
from specbatch.config import TrackingConfig
from specbatch.run.summary import SPECULATIVE, Summary
from specbatch.tracking.store import error_line, open_client

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


class RunLogger:
    """Logging calls for one MLflow run that never take the job down.

    The first failure (tracking server down or unreachable, store locked, ...) is logged once as a warning with the
    URI (credentials masked) and turns the logger inert: the job's files are complete, and ``jobs/log_run.py`` logs
    them later. ``failure`` says what went wrong, or is None while all is well.
    """

    def __init__(self, client: Any, run_id: str | None, experiment_id: str | None, uri: str, later: str) -> None:
        self.client = client
        self.run_id = run_id
        self.experiment_id = experiment_id
        self.uri = uri
        # The command that logs this run later, named in the warning.
        self.later = later
        self.failure: str | None = None

    def _call(self, what: str, method: str, *args: Any, **kwargs: Any) -> Any:
        """``self.client.<method>(self.run_id, ...)``, unless an earlier call failed."""
        return self.client_call(what, method, self.run_id, *args, **kwargs)

    def client_call(self, what: str, method: str, *args: Any, **kwargs: Any) -> Any:
        """``self.client.<method>(...)`` under the same rule, for calls about other runs (search, re-parent)."""
        if self.failure is not None:
            return None
        try:
            return getattr(self.client, method)(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - any tracking failure: the job's own outputs must not depend on it
            self.fail(what, exc)
            return None

    def fail(self, what: str, exc: BaseException) -> None:
        self.failure = f"{what}: {type(exc).__name__}: {mask_text(str(exc))[:500]}"
        log.warning(
            "MLflow tracking at %s failed while %s (%s: %s). The job goes on without MLflow; its Parquet and "
            "summary are written as usual. Log it to MLflow later with: %s",
            mask_uri(self.uri),
            what,
            type(exc).__name__,
            error_line(exc),
            self.later,
        )

    def log_params(self, params: dict[str, str]) -> None:
        from mlflow.entities import Param

        items = [Param(k, v) for k, v in sorted(params.items())]
        for start in range(0, len(items), PARAMS_PER_BATCH):
            self._call("logging params", "log_batch", params=items[start : start + PARAMS_PER_BATCH])

    def log_summary(self, summary: Summary) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now, 0) for k, v in summary.scalar_metrics().items()]
        # One metric stepped by draft position (0 = first drafted token), so the UI draws the acceptance curve.
        for position, rate in enumerate(summary.acceptance_rate_per_position or []):
            metrics.append(Metric("acceptance_rate_per_position", rate, now, position))
        for category, figures in (summary.per_category or {}).items():
            name = metric_safe(category)
            metrics += [Metric(f"category/{name}/{k}", float(v), now, 0) for k, v in figures.items()]
        # spec=auto: what each set-up generated (setup/ngram-k3/mean_acceptance_length), and its drafting set-ups'
        # rows together (setup/speculative/rows: a metric's name takes no parentheses).
        for setup, figures in (summary.per_setup or {}).items():
            name = "speculative" if setup == SPECULATIVE else metric_safe(setup)
            numbers = {k: v for k, v in figures.items() if isinstance(v, int | float) and not isinstance(v, bool)}
            metrics += [Metric(f"setup/{name}/{k}", float(v), now, 0) for k, v in numbers.items()]
        self._log_metric_list(metrics)

    def log_metrics(self, metrics: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self._log_metric_list([Metric(k, float(v), now, 0) for k, v in sorted(metrics.items())])

    def log_stepped_metrics(self, metrics: list[tuple[str, float, int]]) -> None:
        """(name, value, step) triples: one name over several steps draws one line in the UI."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self._log_metric_list([Metric(k, float(v), now, step) for k, v, step in metrics])

    def _log_metric_list(self, metrics: list[Any]) -> None:
        for start in range(0, len(metrics), METRICS_PER_BATCH):
            self._call("logging metrics", "log_batch", metrics=metrics[start : start + METRICS_PER_BATCH])

    def log_text(self, text: str, artifact_file: str) -> None:
        self._call(f"logging {artifact_file}", "log_text", mask_text(text), artifact_file)

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        self._call(f"logging {Path(path).name}", "log_artifact", str(path), artifact_path)

    def log_table(self, data: dict[str, list[Any]], artifact_file: str) -> None:
        self._call(f"logging {artifact_file}", "log_table", data, artifact_file)

    def log_dataset(self, dataset: Any, context: str) -> None:
        from mlflow.entities import DatasetInput, InputTag
        from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

        entry = DatasetInput(dataset._to_mlflow_entity(), tags=[InputTag(MLFLOW_DATASET_CONTEXT, context)])
        self._call("logging the dataset input", "log_inputs", datasets=[entry])

    def set_tag(self, key: str, value: str) -> None:
        self._call(f"setting tag {key}", "set_tag", key, mask_text(value))

    def terminate(self, status: str) -> None:
        self._call(f"marking the run {status}", "set_terminated", status=status)


def mark_run_killed(cfg: TrackingConfig, run_id: str) -> bool:
    """End a run that a killed process left RUNNING as KILLED; False (with a warning) when the store is unreachable."""
    try:
        client, _ = open_client(cfg)
        run = client.get_run(run_id)
        if run.info.status == "RUNNING":
            client.set_terminated(run_id, status="KILLED")
            log.info("MLflow run %s of an earlier launch that was killed is now marked KILLED", run_id)
    except Exception as exc:  # noqa: BLE001 - tracking never stops the job
        log.warning(
            "could not mark MLflow run %s of a killed earlier launch as KILLED (%s: %s); a later launch will retry",
            run_id,
            type(exc).__name__,
            error_line(exc),
        )
        return False
    return True


@contextlib.contextmanager
def mlflow_run(
    cfg: TrackingConfig,
    run_name: str,
    tags: dict[str, str],
    description: str,
    parent_run_id: str | None = None,
    later: str = "python jobs/log_run.py <run folder>",
    client: Future[Any] | None = None,
) -> Iterator[RunLogger | None]:
    """An MLflow run that ends FINISHED, FAILED when the body raises, KILLED when it was stopped by SIGTERM.

    With ``parent_run_id`` (a sweep's parent run) the run is nested under it in the UI. ``client``: new_client(cfg)
    started beforehand on another thread; its error counts as the store's. Yields None when tracking is off, so
    callers write ``if run: ...``; when the store cannot be reached the logger is already inert (``run.failure`` says
    why) and the body runs anyway.
    """
    if not cfg.enabled:
        yield None
        return
    tags = {key: mask_text(value) for key, value in {**tags, "mlflow.note.content": description}.items()}
    if parent_run_id:
        tags["mlflow.parentRunId"] = parent_run_id
    logger = RunLogger(None, None, None, cfg.uri, later)
    try:
        opened, experiment_id = open_client(cfg, client.result() if client else None)
        run = opened.create_run(experiment_id, run_name=run_name, tags=tags)
    except Exception as exc:  # noqa: BLE001 - see RunLogger: tracking never stops the job
        logger.fail("starting the run", exc)
    else:
        logger.client, logger.run_id, logger.experiment_id = opened, run.info.run_id, experiment_id
        log.info(
            "MLflow run %s (%s) in experiment %r at %s", run_name, run.info.run_id, cfg.experiment, mask_uri(cfg.uri)
        )
    try:
        yield logger
    except StopRequested:
        logger.terminate("KILLED")
        raise
    except BaseException:
        logger.terminate("FAILED")
        raise
    logger.terminate("FINISHED")
