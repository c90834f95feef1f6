"""Hydra multiruns (``-m``): what a job knows of its sweep, and the records that tie a sweep to its run folders.

The sweep's MLflow parent run is made by the Hydra callback in specbatch.tracking.sweep, which writes its id to
``<sweep dir>/sweep.json``; each job reads it from there (``current_sweep_job``) and nests its run under it, tagged
with the job's own choices (``override.<key>``). Each job also leaves ``<job dir>/specbatch_run.json`` naming its
run folder, so ``jobs/compare.py <sweep dir>`` finds the runs without MLflow.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from specbatch.common.atomic_files import atomic_write_json
from specbatch.config import SpecConfig, SpecMethod
from specbatch.config.engine import knobs as backend_knobs
from specbatch.config.overrides import override_values

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
        """Swept spec knobs that mean nothing to this job's method, and backend knobs that mean nothing to its
        backend, are dropped, not refused.

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
        # The same for a backend's knob on a job of another backend: -m engine.backend=vllm,server
        # engine.max_concurrency=4 crosses the backends with the server's knob (refused in a single vllm run).
        for key, knob in backend_knobs().items():
            if key in self.choices and knob.foreign_to(cfg.engine.backend):
                log.info(
                    "sweep: engine.backend=%s ignores %s=%s (swept for the other backends)",
                    cfg.engine.backend,
                    key,
                    self.choices[key],
                )
                cfg[knob.section][knob.field.name] = knob.default
        return cfg


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
    return SweepJob(sweep_dir, record.get("parent_run_id"), override_values(list(hc.overrides.task)))


def record_job_run(run_folder: Path, failed: str | None = None) -> None:
    """Leave the run folder's path in this job's Hydra output folder, where jobs/compare.py looks for it; with
    ``failed``, why this job did not finish it (compare names such set-ups instead of silently leaving them out)."""
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        record = {"run_folder": str(run_folder), **({"failed": failed} if failed else {})}
        atomic_write_json(Path(HydraConfig.get().runtime.output_dir) / JOB_FILE, record)


def sweep_run_folders(sweep_dir: Path) -> list[Path]:
    """Run folders of a sweep's jobs that finished, in job order (from each job's specbatch_run.json)."""
    return [folder for folder, failed in sweep_jobs(sweep_dir) if failed is None]


def sweep_failures(sweep_dir: Path) -> list[str]:
    """One line per job of the sweep that did not finish its run: its choices and why."""
    lines = []
    for job_dir in sorted(p for p in Path(sweep_dir).iterdir() if p.is_dir() and p.name.isdigit()):
        record_path = job_dir / JOB_FILE
        choices = " ".join(_job_overrides(job_dir)) or job_dir.name
        if not record_path.is_file():
            lines.append(f"job {job_dir.name} ({choices}) left no record: it did not finish")
            continue
        failed = json.loads(record_path.read_text()).get("failed")
        if failed:
            lines.append(f"job {job_dir.name} ({choices}) failed: {failed}")
    return lines


def sweep_jobs(sweep_dir: Path) -> list[tuple[Path, str | None]]:
    """(run folder, why the job failed or None) of every job that left a record, in job order."""
    found = sorted(
        Path(sweep_dir).glob(f"*/{JOB_FILE}"),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    records = [json.loads(p.read_text()) for p in found]
    return [(Path(r["run_folder"]), r.get("failed")) for r in records]


def _job_overrides(job_dir: Path) -> list[str]:
    """The job's own overrides, as Hydra recorded them in <job dir>/.hydra/overrides.yaml."""
    path = job_dir / ".hydra" / "overrides.yaml"
    if not path.is_file():
        return []
    from omegaconf import OmegaConf

    return [str(item) for item in OmegaConf.load(path)]
