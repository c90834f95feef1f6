"""A run folder's merged MLflow run: one parent run holding the figures merged over the folder's shards, with the
shards' own runs nested under it. Written by ``jobs/merge.py``; a tracking server that is down leaves the merged
files as they are and names the command that logs them later.
"""

from __future__ import annotations

import json
from pathlib import Path

from specbatch.config import TrackingConfig
from specbatch.engine.acceptance_settings import as_params
from specbatch.run.folder import RunFolder, read_run
from specbatch.run.summary import Summary
from specbatch.tracking.logger import mlflow_run
from specbatch.tracking.run_contents import run_name
from specbatch.tracking.store import recorded_tracking


def log_merged(root: Path, summary: Summary) -> None:
    """A parent MLflow run holding the merged figures; the shards' runs become its children."""
    config = read_run(root)["config"]
    tracking = recorded_tracking(config["tracking"])
    if not tracking.enabled:
        return
    tags = {
        "method": summary.method,
        "k": str(summary.num_speculative_tokens or "none"),
        "model": config["model"]["name"],
        "dataset": config["dataset"]["name"],
        "run_folder": str(root),
        "merged": "true",
    }
    name = run_name(config, None, concurrency=summary.concurrency, part="merged")
    log_merged_run(tracking, name, tags, root, summary)


def log_merged_run(
    tracking: TrackingConfig, name: str, tags: dict[str, str], run_folder: Path, summary: Summary
) -> None:
    """A parent run holding a run folder's merged figures; the folder's shard runs become its children."""
    later = f"python jobs/merge.py {run_folder}"
    with mlflow_run(tracking, name, tags, f"merged shards of {run_folder}", later=later) as run:
        if run is None:
            return
        run.log_summary(summary)
        run.log_params(as_params(summary.acceptance_settings))
        run.log_text(json.dumps(summary.to_dict(), indent=2), "summary.json")
        profile = RunFolder(run_folder).merged_profile_path
        if profile.is_file():
            run.log_artifact(profile, "speculation_profile")
        folder_filter = f"tags.run_folder = '{run_folder}'"
        shards = run.client_call("finding the shard runs", "search_runs", [run.experiment_id], folder_filter)
        for child in shards or []:
            if child.info.run_id != run.run_id and child.data.tags.get("merged") != "true":
                run.client_call("nesting a shard run", "set_tag", child.info.run_id, "mlflow.parentRunId", run.run_id)
