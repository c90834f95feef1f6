"""A Hydra multirun (``-m``) as one MLflow parent run with a child run per job (the Hydra callback).

The parent is created once, in the launching process, before any job starts (``on_multirun_start``), so jobs
running in parallel (Slurm array tasks) never race to create it. Its id is written to ``<sweep dir>/sweep.json``
(specbatch.run.sweep), where each job reads it and nests its run under it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from specbatch.common.files import atomic_write_json
from specbatch.config import TrackingConfig
from specbatch.run.sweep import SWEEP_FILE, read_sweep
from specbatch.tracking.parents import end_sweep_run, start_sweep_run
from specbatch.tracking.store import recorded_tracking


def _tracking(config: DictConfig) -> TrackingConfig:
    plain = OmegaConf.to_container(config.tracking, resolve=True)
    assert isinstance(plain, dict)
    return recorded_tracking(plain)


class MlflowSweepCallback(Callback):
    """Opens the sweep's parent run before the jobs and closes it after them."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir).resolve()
        sweep_dir.mkdir(parents=True, exist_ok=True)
        tracking = _tracking(config)
        record: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "parent_run_id": None}
        if tracking.enabled:
            record.update(start_sweep_run(tracking, sweep_dir, [str(o) for o in config.hydra.overrides.task]))
        atomic_write_json(sweep_dir / SWEEP_FILE, record)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        record = read_sweep(Path(config.hydra.sweep.dir).resolve())
        if record.get("parent_run_id"):
            end_sweep_run(_tracking(config), record["parent_run_id"], record["experiment_id"])
