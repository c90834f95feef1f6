"""Hydra multiruns (``-m``) as one MLflow parent run with a child run per job.

The parent is created once, in the launching process, before any job starts (``on_multirun_start``), so jobs
running in parallel (Slurm array tasks) never race to create it. Its id is written to ``<sweep dir>/sweep.json``;
each job reads it from there and nests its run under it, tagged with the job's own choices (``override.<key>``).
Each job also leaves ``<job dir>/specbatch_run.json`` naming its run folder, so ``jobs/compare.py <sweep dir>``
finds the runs without MLflow.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from specbatch.common.files import atomic_write_json
from specbatch.common.masking import mask_text, mask_uri
from specbatch.config import SpecConfig, SpecMethod, TrackingConfig

log = logging.getLogger(__name__)

SWEEP_FILE = "sweep.json"
JOB_FILE = "specbatch_run.json"


@dataclass(frozen=True)
class SweepJob:
    """What a job of a multirun needs to know about its sweep."""

    sweep_dir: Path
    # The MLflow parent run, or None when tracking is off.
    parent_run_id: str | None
    # This job's own choices, e.g. {"spec": "ngram", "spec.num_speculative_tokens": "3"}.
    choices: dict[str, str]

    def tags(self) -> dict[str, str]:
        return {"sweep_dir": str(self.sweep_dir), **{f"override.{k}": v for k, v in self.choices.items()}}

    def drop_foreign_knobs(self, cfg: DictConfig) -> DictConfig:
        """Swept spec knobs that mean nothing to this job's method are dropped, not refused.

        ``-m spec=none,ngram,suffix spec.num_speculative_tokens=1,2`` crosses the baseline with every k; a single
        run with ``spec=none spec.num_speculative_tokens=2`` is a mistake and is refused, but here it is just the
        cross product. The baseline's jobs then share one run folder: the first runs, the others find it done.
        """
        method = SpecMethod(cfg.spec.method)
        for key, value in self.choices.items():
            knob = key.removeprefix("spec.")
            if key.startswith("spec.") and not SpecConfig.knob_applies(method, knob):
                log.info("sweep: spec=%s ignores %s=%s (swept for the other methods)", method.value, key, value)
                cfg.spec[knob] = None
        return cfg


def parse_overrides(overrides: list[str]) -> dict[str, str]:
    """``["spec=ngram", "+x=1", "~y"]`` → ``{"spec": "ngram", "x": "1", "y": "(deleted)"}``."""
    out = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        out[key.lstrip("+~")] = value if sep else "(deleted)"
    return out


def _tracking(config: DictConfig) -> TrackingConfig:
    from specbatch.tracking.mlflow_logger import recorded_tracking

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
            try:
                record.update(self._create_parent(config, tracking, sweep_dir))
            except Exception as exc:  # noqa: BLE001 - the sweep runs without MLflow rather than not at all
                log.warning(
                    "sweep: no MLflow parent run (%s at %s: %s); the jobs still run and log on their own",
                    type(exc).__name__,
                    mask_uri(tracking.uri),
                    mask_text(str(exc)).splitlines()[0][:300] if str(exc) else "",
                )
        atomic_write_json(sweep_dir / SWEEP_FILE, record)

    def _create_parent(self, config: DictConfig, tracking: TrackingConfig, sweep_dir: Path) -> dict[str, Any]:
        from specbatch.tracking.mlflow_logger import open_client

        swept = mask_text(" ".join(config.hydra.overrides.task))
        client, experiment_id = open_client(tracking)
        run = client.create_run(
            experiment_id,
            run_name=f"sweep {time.strftime('%Y-%m-%d %H:%M:%S')}",
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
        log.info("sweep parent MLflow run %s in experiment %r", run.info.run_id, tracking.experiment)
        return {
            "parent_run_id": run.info.run_id,
            "experiment_id": experiment_id,
            # Masked: sweep.json is a file anyone may read; jobs/compare.py then takes MLFLOW_TRACKING_URI.
            "tracking_uri": mask_uri(tracking.uri),
            "overrides": swept,
        }

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir).resolve()
        record = read_sweep(sweep_dir)
        if not record.get("parent_run_id"):
            return
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=_tracking(config).uri)
        children = client.search_runs(
            [record["experiment_id"]], filter_string=f"tags.mlflow.parentRunId = '{record['parent_run_id']}'"
        )
        failed = [c.info.run_name for c in children if c.info.status == "FAILED"]
        client.set_tag(record["parent_run_id"], "sweep.jobs", str(len(children)))
        # A parent with a failed child shows FAILED, so a half-failed sweep stands out in the runs table.
        client.set_terminated(record["parent_run_id"], status="FAILED" if failed else "FINISHED")
        if failed:
            log.warning("sweep: %d of %d jobs failed: %s", len(failed), len(children), ", ".join(failed))


def read_sweep(sweep_dir: Path) -> dict[str, Any]:
    path = Path(sweep_dir) / SWEEP_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{sweep_dir} is not a sweep folder (no {SWEEP_FILE}); pass the folder of a -m run")
    return json.loads(path.read_text())


def current_sweep_job() -> SweepJob | None:
    """This job's sweep, when running inside a Hydra multirun; None for a single run (or outside Hydra)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return None
    hc = HydraConfig.get()
    if hc.mode != RunMode.MULTIRUN:
        return None
    sweep_dir = Path(hc.sweep.dir).resolve()
    record = read_sweep(sweep_dir) if (sweep_dir / SWEEP_FILE).is_file() else {}
    return SweepJob(sweep_dir, record.get("parent_run_id"), parse_overrides(list(hc.overrides.task)))


def record_job_run(run_folder: Path) -> None:
    """Leave the run folder's path in this job's Hydra output folder, where jobs/compare.py looks for it."""
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        atomic_write_json(Path(HydraConfig.get().runtime.output_dir) / JOB_FILE, {"run_folder": str(run_folder)})


def sweep_run_folders(sweep_dir: Path) -> list[Path]:
    """Run folders of a sweep's jobs, in job order (from each job's specbatch_run.json)."""
    found = sorted(
        Path(sweep_dir).glob(f"*/{JOB_FILE}"),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    return [Path(json.loads(p.read_text())["run_folder"]) for p in found]
