"""The compare job: find the runs, compare them, write tables and plots, log them to MLflow.

Runs can be named as run folders, as a folder holding run folders (e.g. ``outputs/runs``), as the folder of a
Hydra sweep (``-m``), or as the MLflow parent run of a sweep. The results go to the sweep's parent run when there
is one (so the sweep's page in the UI carries its own verdict), else to a new "compare" run.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from specbatch.analysis.commands import config_repeat_command, sweep_repeat_command
from specbatch.analysis.compare import CompareError, Comparison, compare
from specbatch.analysis.k_schedules import write_schedules
from specbatch.analysis.plots import plot_all
from specbatch.analysis.recommend import MIN_REPEATS
from specbatch.analysis.run_data import RunData, load_run
from specbatch.analysis.tables import format_comparison, write_comparison
from specbatch.common.masking import mask_uri
from specbatch.config import ConfigError, JobConfig, check_known_keys, job_schema, spec_caption, to_job_config
from specbatch.engine import backend_class
from specbatch.run.folder import is_run_folder, not_a_run_folder, read_run, run_folders_below
from specbatch.run.multirun import SWEEP_FILE, read_sweep, sweep_failures, sweep_run_folders
from specbatch.run.status_merge import RunIncompleteError
from specbatch.tracking.comparison import attach_to_run, compared_runs_link, log_run_figures, nested_runs
from specbatch.tracking.logger import RunLogger, metric_safe, mlflow_run
from specbatch.tracking.store import TrackingUnreachable, recorded_tracking

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Sources:
    run_folders: list[Path]
    # The sweep's MLflow parent run and where it lives, when the runs came from one sweep.
    parent_run_id: str | None = None
    tracking_uri: str | None = None
    sweep_dir: Path | None = None
    # The sweep's jobs that did not finish their runs: their choices and why (see run.sweep.sweep_failures).
    failed_jobs: tuple[str, ...] = ()


def find_runs(paths: list[Path]) -> Sources:
    """Run folders named by ``paths`` (run folders, sweep folders, or folders holding run folders)."""
    folders: list[Path] = []
    failed: list[str] = []
    sweeps: list[dict[str, Any]] = []
    sweep_dirs: list[Path] = []
    for path in (Path(p).resolve() for p in paths):
        if is_run_folder(path):
            folders.append(path)
        elif (path / SWEEP_FILE).is_file():
            found = sweep_run_folders(path)
            failed += sweep_failures(path)
            if not found:
                raise CompareError(
                    f"sweep {path} has no finished job yet (no */specbatch_run.json)"
                    + "".join(f"; {line}" for line in failed)
                )
            folders += found
            sweeps.append(read_sweep(path))
            sweep_dirs.append(path)
        elif path.is_dir():
            found = run_folders_below(path)
            if not found:
                raise CompareError(f"{path} holds no run folder (no run.json below it)")
            folders += found
        elif path.is_file():
            raise CompareError(f"{not_a_run_folder(path)}, a sweep folder, or outputs/runs")
        else:
            raise CompareError(f"{path} does not exist: pass run folders, a sweep folder, or outputs/runs")
    unique = list(dict.fromkeys(folders))
    if len(sweeps) == 1 and len(paths) == 1:
        parent, uri = sweeps[0].get("parent_run_id"), sweeps[0].get("tracking_uri")
        return Sources(unique, parent, uri, sweep_dirs[0], tuple(failed))
    return Sources(unique, failed_jobs=tuple(failed))


def runs_of_parent(tracking_uri: str, parent_run_id: str) -> Sources:
    """The run folders of a sweep's child runs in MLflow (their ``run_folder`` tag)."""
    try:
        parent, children = nested_runs(tracking_uri, parent_run_id)
    except TrackingUnreachable as exc:
        raise CompareError(f"MLflow run {parent_run_id} at {mask_uri(tracking_uri)} could not be read: {exc}") from exc
    folders = [Path(tags["run_folder"]) for tags in children if "run_folder" in tags]
    if not folders:
        raise CompareError(
            f"MLflow run {parent_run_id} at {mask_uri(tracking_uri)} has no child runs with a run_folder tag"
        )
    sweep_dir = parent.get("sweep_dir")
    return Sources(
        list(dict.fromkeys(sorted(folders))), parent_run_id, tracking_uri, Path(sweep_dir) if sweep_dir else None
    )


@dataclass(frozen=True)
class CompareResult:
    comparison: Comparison
    out_dir: Path
    files: list[Path]
    mlflow_run_id: str | None


def _load_runs(folders: list[Path]) -> tuple[list[RunData], list[str]]:
    """The runs that can be read whole; the others (a shard not done, a damaged summary) are named, not compared."""
    runs, skipped = [], []
    for folder in folders:
        try:
            runs.append(load_run(folder))
        except (RunIncompleteError, OSError, ValueError) as exc:
            skipped.append(f"not compared: {exc}")
    if not runs:
        raise CompareError("no run can be compared: " + "; ".join(skipped))
    for line in skipped:
        log.warning("%s", line)
    return runs, skipped


def run_compare(sources: Sources, out_dir: Path | None = None, log_to_mlflow: bool = True) -> CompareResult:
    runs, skipped = _load_runs(sources.run_folders)
    comparison = compare(runs)
    comparison.notes += [f"sweep {line}" for line in sources.failed_jobs] + skipped
    if out_dir is None:
        out_dir = _default_out_dir(sources)
    command = repeat_command(sources, comparison, runs)
    if command:
        comparison.notes.append(f"to measure every set-up {MIN_REPEATS} times, run: {command}")
    schedules = write_schedules(comparison.schedules, out_dir)
    files = write_comparison(comparison, out_dir) + plot_all(comparison, out_dir) + schedules
    log.info("compared %d runs; written: %s", len(runs), ", ".join(str(f) for f in files))
    run_id = _log(comparison, files, sources, out_dir) if log_to_mlflow else None
    return CompareResult(comparison, out_dir, files, run_id)


def repeat_command(sources: Sources, comparison: Comparison, runs: list[RunData]) -> str | None:
    """The command that repeats the set-ups of batch sizes with too few repeats; None when none lacks any.

    A sweep's own command line when the runs came from one sweep folder; else rebuilt from the runs' configs."""
    short = {(r.workload, r.batch_size) for r in comparison.recommendations if not r.enough_repeats}
    if not short:
        return None
    # The sweep's own command line, unless a job of it failed: that would sweep the failing value again.
    if sources.sweep_dir is not None and not sources.failed_jobs:
        command = sweep_repeat_command(sources.sweep_dir)
        if command:
            return command
    # A schedule run is not a set-up the picks stand on, and its spec.k_schedule would be swept onto every run.
    return config_repeat_command(
        r.config for r in runs if (r.workload, r.batch_size) in short and r.k_schedule is None
    )


def _default_out_dir(sources: Sources) -> Path:
    if sources.sweep_dir is not None:
        return sources.sweep_dir / "comparison"
    # <output_root>/runs/<dataset>/<model>/<run>: comparisons sit beside runs/.
    output_root = sources.run_folders[0].parents[3]
    return output_root / "comparisons" / time.strftime("%Y-%m-%d_%H-%M-%S")


def summary_metrics(comparison: Comparison) -> list[tuple[str, float, int]]:
    """The compare (or sweep parent) run's few metrics, as (name, value, step): the recommended speedup stepped by
    batch size (one chart over batch size) and how many runs were compared. Per-run figures go onto the compared
    runs themselves (:func:`run_figures`), where MLflow's charts compare runs."""
    workloads = sorted({(r.model, r.dataset, r.dtype) for r in comparison.recommendations})
    metrics = [("runs_compared", float(sum(r.repeats for r in comparison.rows)), 0)]
    for rec in comparison.recommendations:
        # One name per workload when several were compared at once (the steps would collide).
        name = "best_speedup" if len(workloads) == 1 else f"best_speedup/{rec.model}/{rec.dataset}/{rec.dtype}"
        metrics.append((metric_safe(name), rec.speedup, rec.batch_size))
    return metrics


# The prefix of compare's figures on each compared run. MLflow 3's chart view puts metrics with a "<prefix>/" in a
# section of that name and shows those sections, sorted by name, before its "Model metrics": "against_none" sorts
# before the job's own "category/..." sections, so speedup is among the first charts a person sees.
RUN_FIGURES_PREFIX = "against_none"


def run_figures(comparison: Comparison) -> list[tuple[Path, dict[str, float], Path, dict[str, str]]]:
    """What goes onto each compared run: ``against_none/speedup`` (its tok/s over its baseline's median) and
    ``against_none/identical_share`` (rows identical to the baseline's first repeat); under sampling, as the greedy
    equality is for greedy runs, the distribution check: ``against_none/distribution_p_value``,
    ``against_none/detectable_tv`` and the tag ``against_none.distribution`` (its verdict)."""
    out = []
    for figure in comparison.run_figures:
        metrics = {f"{RUN_FIGURES_PREFIX}/speedup": figure.speedup}
        tags: dict[str, str] = {}
        if figure.identical_share is not None:
            metrics[f"{RUN_FIGURES_PREFIX}/identical_share"] = figure.identical_share
        test = figure.distribution
        if test is not None:
            tags[f"{RUN_FIGURES_PREFIX}.distribution"] = test.verdict
            if test.p_value is not None and test.detectable_tv is not None:
                metrics[f"{RUN_FIGURES_PREFIX}/distribution_p_value"] = test.p_value
                metrics[f"{RUN_FIGURES_PREFIX}/detectable_tv"] = test.detectable_tv
        out.append((Path(figure.run_folder), metrics, Path(figure.baseline_folder), tags))
    return out


def _log_run_figures(comparison: Comparison, out_dir: Path) -> None:
    try:
        places = log_run_figures(run_figures(comparison), str(out_dir))
    except TrackingUnreachable as exc:  # the comparison's files and its own run are written already
        log.warning("the compared runs' own MLflow runs did not get %s/ figures: %s", RUN_FIGURES_PREFIX, exc)
        return
    if "'" in str(out_dir):
        return  # no filter can name it
    sort_metric = f"{RUN_FIGURES_PREFIX}/speedup"
    for uri, experiment_id in places:
        log.info(
            "MLflow: the compared runs, best %s first: %s (charts: %s)",
            sort_metric,
            compared_runs_link(uri, experiment_id, str(out_dir), sort_metric),
            compared_runs_link(uri, experiment_id, str(out_dir), sort_metric, charts=True),
        )


def _log(comparison: Comparison, files: list[Path], sources: Sources, out_dir: Path) -> str | None:
    metrics = summary_metrics(comparison)
    tags = {f"recommended.bs{r.batch_size}": spec_caption(r.method, r.k) for r in comparison.recommendations}
    tags |= {f"k_schedule.{Path(s.preset).stem}": s.override for s in comparison.schedules if s.preset}
    _log_run_figures(comparison, out_dir)

    def fill(run: RunLogger) -> None:
        run.log_stepped_metrics(metrics)
        run.log_text(format_comparison(comparison), "comparison/comparison.md")
        for path in files:
            run.log_artifact(path, "comparison")
        for key, value in tags.items():
            run.set_tag(key, value)

    if sources.parent_run_id and sources.tracking_uri:
        # The sweep's own parent run carries its verdict.
        written = files[0].parent
        later = f"python jobs/compare.py {sources.sweep_dir or '--mlflow-run ' + sources.parent_run_id}"
        try:
            run = attach_to_run(sources.tracking_uri, sources.parent_run_id, later)
        except TrackingUnreachable as exc:  # one clear line; the files are already written
            raise CompareError(
                f"the comparison is written to {written}, but the sweep's MLflow run could not be reached: "
                f"{exc}; rerun with --no-mlflow or later"
            ) from exc
        fill(run)
        if run.failure:
            raise CompareError(f"the comparison is written to {written}, but logging it failed: {run.failure}")
        log.info("comparison logged to the sweep's MLflow run %s", sources.parent_run_id)
        return sources.parent_run_id
    tracking = recorded_tracking(read_run(sources.run_folders[0])["config"]["tracking"])
    if not tracking.enabled:
        log.info("tracking is off for these runs: comparison not logged to MLflow")
        return None
    description = "Comparison of " + ", ".join(str(f) for f in sources.run_folders)
    with mlflow_run(
        tracking, f"compare {len(sources.run_folders)} runs", {"specbatch.kind": "compare"}, description
    ) as run:
        assert run is not None
        fill(run)
        return None if run.failure else run.run_id


def recorded_job(config: dict[str, Any]) -> JobConfig:
    """A run's recorded config (run.json) as a checked JobConfig; keys added since the run take their defaults.

    Raises ConfigError when the record no longer fits the schema (a key since removed, a value since refused)."""
    check_known_keys(OmegaConf.create(config))
    try:
        merged = OmegaConf.merge(job_schema(), config)
    except OmegaConfBaseException as exc:
        raise ConfigError(f"the recorded config does not fit today's schema: {exc}") from None
    # Recorded with every backend's knobs (as run.json always was): another backend's are inert, not refused.
    return to_job_config(merged, foreign_knobs=True)


def serve_commands(comparison: Comparison) -> list[str]:
    """How to serve each recommendation: the vLLM server command of the winning run's recorded config (so exactly
    its model, speculative_config and batch), or llama-server's for a llama.cpp run, one line for all batch sizes
    when their commands are the same."""
    by_command: dict[str, list[str]] = {}
    failures = []
    for rec in comparison.recommendations:
        # A recommendation is always a fixed k (schedules are what compare writes from them, not candidates).
        setup = (rec.model, rec.dataset, rec.dtype, rec.batch_size, rec.method, rec.k, None)
        rows = [
            r
            for r in comparison.rows
            if (r.model, r.dataset, r.dtype, r.batch_size, r.method, r.k, r.k_schedule) == setup and r.variant is None
        ]
        if not rows or not rows[0].run_folders:
            continue
        folder = Path(rows[0].run_folders[0])
        try:
            job = recorded_job(read_run(folder)["config"])
            command = backend_class(job.engine.backend).serve_command(job)
        except (ConfigError, OSError) as exc:
            failures.append(f"serve batch size {rec.batch_size}: no command, as the config of {folder} fails: {exc}")
            continue
        caption = spec_caption(rec.method, rec.k)
        by_command.setdefault(command, []).append(f"{rec.batch_size} ({caption})")
    lines = [f"serve batch size {', '.join(sizes)}: {command}" for command, sizes in by_command.items()]
    return lines + failures
