"""Runs that group other runs: a sweep's parent run, the merged run over a run folder's shards, and the look-ups
and logging that compare does on a sweep's parent.

The shard runs themselves are logged by ``logger``/``review``; everything here uses the same safety net: a client
from ``store.new_client``, failures cut to one masked line, and a tracking server that is down never takes down
the work whose files are already written (the sweep's jobs, the merged files).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from specbatch.common.masking import mask_uri
from specbatch.config import TrackingConfig, spec_label
from specbatch.run.folder import read_run
from specbatch.run.summary import Summary
from specbatch.tracking.logger import RunLogger, mlflow_run
from specbatch.tracking.store import (
    children_of,
    error_line,
    new_client,
    open_client,
    recorded_tracking,
    unreachable,
)

log = logging.getLogger(__name__)


def start_sweep_run(tracking: TrackingConfig, sweep_dir: Path, swept: str) -> dict[str, Any]:
    """Create a sweep's parent run; returns what sweep.json records about it, or {} when the store is unreachable.

    ``swept`` is the sweep's overrides, already masked.
    """
    try:
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


def log_merged_run(
    tracking: TrackingConfig, name: str, tags: dict[str, str], run_folder: Path, summary: Summary
) -> None:
    """A parent run holding a run folder's merged figures; the folder's shard runs become its children."""
    later = f"python jobs/merge.py {run_folder}"
    with mlflow_run(tracking, name, tags, f"merged shards of {run_folder}", later=later) as run:
        if run is None:
            return
        run.log_summary(summary)
        run.log_text(json.dumps(summary.to_dict(), indent=2), "summary.json")
        folder_filter = f"tags.run_folder = '{run_folder}'"
        shards = run.client_call("finding the shard runs", "search_runs", [run.experiment_id], folder_filter)
        for child in shards or []:
            if child.info.run_id != run.run_id and child.data.tags.get("merged") != "true":
                run.client_call("nesting a shard run", "set_tag", child.info.run_id, "mlflow.parentRunId", run.run_id)


def nested_runs(uri: str, parent_run_id: str) -> tuple[dict[str, str], list[dict[str, str]]]:
    """The tags of a parent run and of each run nested under it; TrackingUnreachable when they cannot be read."""
    try:
        client = new_client(recorded_tracking({"uri": uri}))
        parent = client.get_run(parent_run_id)
        children = children_of(client, parent.info.experiment_id, parent_run_id)
    except Exception as exc:  # noqa: BLE001 - one masked line for the caller's message
        raise unreachable(exc) from exc
    return dict(parent.data.tags), [dict(child.data.tags) for child in children]


def attach_to_run(uri: str, run_id: str, later: str) -> RunLogger:
    """A logger on an existing run (e.g. a sweep's parent, for its comparison); TrackingUnreachable when the run
    cannot be reached. ``uri`` may be a recorded (masked) one, see ``recorded_tracking``."""
    try:
        client = new_client(recorded_tracking({"uri": uri}))
        run = client.get_run(run_id)
    except Exception as exc:  # noqa: BLE001 - one masked line for the caller's message
        raise unreachable(exc) from exc
    return RunLogger(client, run_id, run.info.experiment_id, uri, later)


def log_merged(root: Path, summary: Summary) -> None:
    """A parent MLflow run holding the merged figures; the shards' runs become its children."""
    config = read_run(root)["config"]
    tracking = recorded_tracking(config["tracking"])
    if not tracking.enabled:
        return
    label = spec_label(summary.method, summary.num_speculative_tokens, config["spec"].get("k_schedule"))
    name = f"{config['model']['name']}/{label}"
    tags = {
        "method": summary.method,
        "k": str(summary.num_speculative_tokens or "none"),
        "model": config["model"]["name"],
        "dataset": config["dataset"]["name"],
        "run_folder": str(root),
        "merged": "true",
    }
    log_merged_run(tracking, f"{name}/{config['dataset']['name']}/merged", tags, root, summary)
