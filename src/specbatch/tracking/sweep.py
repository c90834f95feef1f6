"""A Hydra multirun (``-m``) as one MLflow parent run with a child run per job: the parent run itself and the Hydra
callback that opens and closes it.

The parent is created once, in the launching process, before any job starts (``on_multirun_start``), so jobs
running in parallel (Slurm array tasks) never race to create it. Its id is written to ``<sweep dir>/sweep.json``
(specbatch.run.multirun), where each job reads it and nests its run under it. A tracking server that is down never
stops the sweep: its jobs run and log on their own.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from specbatch.common.atomic_files import atomic_write_json
from specbatch.common.masking import mask_text, mask_uri
from specbatch.config import TrackingConfig
from specbatch.config.overrides import swept_overrides
from specbatch.run.multirun import SWEEP_FILE, read_sweep
from specbatch.tracking.store import children_of, error_line, new_client, open_client, recorded_tracking

log = logging.getLogger(__name__)


def sweep_run_name(overrides: list[str]) -> str:
    """``sweep spec=none,ngram × engine.max_num_seqs=1,4 × repeat=0,1,2``: the swept overrides (a value list or one
    of Hydra's sweep functions), so a parent run in the runs table says what its children vary; fixed overrides stay
    in the sweep.overrides tag. ``sweep <time>`` when nothing is swept."""
    swept = swept_overrides(overrides)
    return "sweep " + (" × ".join(swept) if swept else time.strftime("%Y-%m-%d %H:%M:%S"))


def start_sweep_run(tracking: TrackingConfig, sweep_dir: Path, overrides: list[str]) -> dict[str, Any]:
    """Create a sweep's parent run; returns what sweep.json records about it, or {} when the store is unreachable.

    ``overrides``: the sweep's command-line overrides as Hydra recorded them; masked before they are written.
    """
    swept = mask_text(" ".join(overrides))
    try:
        client, experiment_id = open_client(tracking)
        run = client.create_run(
            experiment_id,
            run_name=mask_text(sweep_run_name(overrides)),
            tags={
                "specbatch.kind": "sweep",
                "sweep_dir": str(sweep_dir),
                "sweep.overrides": swept,
                "mlflow.note.content": (
                    f"Sweep `{swept}`: one child run per job. Select the children and press Compare; "
                    f"`python jobs/compare.py {sweep_dir}` adds speedup over spec=none here."
                ),
            },
        )
    except Exception as exc:  # noqa: BLE001 - the sweep runs without MLflow rather than not at all
        log.warning(
            "sweep: no MLflow parent run (%s at %s: %s); the jobs still run and log on their own",
            type(exc).__name__,
            mask_uri(tracking.uri),
            error_line(exc),
        )
        return {}
    log.info("sweep parent MLflow run %s in experiment %r", run.info.run_id, tracking.experiment)
    return {
        "parent_run_id": run.info.run_id,
        "experiment_id": experiment_id,
        # Masked: sweep.json is a file anyone may read; jobs/compare.py then takes MLFLOW_TRACKING_URI.
        "tracking_uri": mask_uri(tracking.uri),
        "overrides": swept,
    }


def end_sweep_run(tracking: TrackingConfig, parent_run_id: str, experiment_id: str) -> None:
    """Count the sweep's child runs on its parent and end it: FAILED when a child failed, else FINISHED.

    When the store cannot be reached the parent stays RUNNING, with a warning: the jobs' own runs are complete.
    """
    try:
        client = new_client(tracking)
        children = children_of(client, experiment_id, parent_run_id)
        failed = [c.info.run_name for c in children if c.info.status == "FAILED"]
        client.set_tag(parent_run_id, "sweep.jobs", str(len(children)))
        # A parent with a failed child shows FAILED, so a half-failed sweep stands out in the runs table.
        client.set_terminated(parent_run_id, status="FAILED" if failed else "FINISHED")
    except Exception as exc:  # noqa: BLE001 - the jobs are done and logged; only the parent's status is missing
        log.warning(
            "sweep: could not end the MLflow parent run %s (%s at %s: %s); it stays RUNNING",
            parent_run_id,
            type(exc).__name__,
            mask_uri(tracking.uri),
            error_line(exc),
        )
        return
    if failed:
        log.warning("sweep: %d of %d jobs failed: %s", len(failed), len(children), ", ".join(failed))


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
