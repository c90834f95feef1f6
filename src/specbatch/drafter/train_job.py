"""jobs/train_drafter.py: a head trained on exports, observed by an MLflow run in the store of the data's run.

The MLflow run (tracking off in the data's run, or --no-mlflow: none) holds the settings and the data as params, the
loss and speculators' per-position accuracies as curves over the steps, the head's own record as an artifact, and
the data's run folders as the tag ``specbatch.data_runs``. Its store is the one the first data run recorded
(run.json's tracking section), so the head's training sits beside the run that made its data.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path
from typing import Any

from specbatch.drafter.train import TRAINED_RECORD, TrainResult, TrainSettings, read_exports, train_head
from specbatch.run.folder import read_run
from specbatch.tracking.logger import flatten, mlflow_run
from specbatch.tracking.store import recorded_tracking

log = logging.getLogger(__name__)

# Steps of the loss curve sent to MLflow in one call.
FLUSH_STEPS = 20


def train_drafter(exports: list[Path], out: Path, settings: TrainSettings, log_to_mlflow: bool = True) -> TrainResult:
    """Train a head on ``exports`` into ``out`` (specbatch.drafter.train), observed by an MLflow run."""
    data = read_exports(exports)
    tracking = _tracking_of(data.runs[0]) if log_to_mlflow else None
    if tracking is None or not tracking.enabled:
        return train_head(data, out, settings)
    tags = {"specbatch.kind": "drafter_training", "specbatch.data_runs": ", ".join(data.runs)}
    description = f"EAGLE-3 head for {data.model['name']} trained on {', '.join(data.runs)}; written to {out}"
    with mlflow_run(tracking, f"eagle3 head {Path(out).name}", tags, description) as run:
        assert run is not None
        params = {**asdict(settings), "model": data.model["path"], "layer_ids": data.layer_ids}
        run.log_params(flatten({"train": params}))
        pending: list[tuple[str, float, int]] = []

        def on_step(step: int, loss: float, accuracies: dict[str, float]) -> None:
            pending.extend([("train/loss", loss, step), *((f"train/{k}", v, step) for k, v in accuracies.items())])
            if step % FLUSH_STEPS == 0:
                run.log_stepped_metrics(pending)
                pending.clear()

        result = train_head(data, out, settings, on_step)
        run.log_stepped_metrics(pending)
        run.log_metrics({"train/steps": result.steps, "train/tokens": result.tokens, "train/seconds": result.seconds})
        run.log_artifact(Path(out) / TRAINED_RECORD)
        if run.failure:
            log.warning("the head is at %s, but logging its training to MLflow failed: %s", out, run.failure)
    return result


def _tracking_of(run: str) -> Any:
    """The tracking config the data's run recorded; None (with a line) when its folder is gone."""
    try:
        return recorded_tracking(read_run(Path(run))["config"]["tracking"])
    except FileNotFoundError:
        log.warning("the data's run %s is gone: its MLflow store is not known, the training is not logged", run)
        return None
