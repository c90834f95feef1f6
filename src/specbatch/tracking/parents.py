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
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit, urlunsplit

from specbatch.common.masking import mask_text, mask_uri
from specbatch.config import TrackingConfig
from specbatch.config.overrides import swept_overrides
from specbatch.run.folder import read_run
from specbatch.run.summary import Summary
from specbatch.tracking.logger import RunLogger, mlflow_run
from specbatch.tracking.review import run_name
from specbatch.tracking.store import (
    children_of,
    error_line,
    new_client,
    open_client,
    recorded_tracking,
    unreachable,
)

log = logging.getLogger(__name__)

# The tag compare sets on each compared run: where the comparison was written (a filter for its runs in the UI).
COMPARISON_TAG = "comparison"


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


@dataclass(frozen=True)
class FolderRuns:
    """A run folder's MLflow runs: a client on the store it recorded, where they are, and their ids."""

    client: Any
    uri: str
    experiment_id: str
    run_ids: list[str]


def folder_run_ids(folders: list[Path]) -> dict[Path, FolderRuns]:
    """Each run folder's MLflow runs in the store it recorded: its merged run when there is one (it stands for the
    whole folder), else its shard runs. Folders with tracking off, or not found in their store, are left out.
    Raises TrackingUnreachable when a store cannot be read."""
    found: dict[Path, FolderRuns] = {}
    clients: dict[tuple[str, str], tuple[Any, str | None]] = {}
    for folder in folders:
        try:
            # Raises for a recorded URI whose password was masked and is not in the environment.
            tracking = recorded_tracking(read_run(folder)["config"]["tracking"])
            if not tracking.enabled or "'" in str(folder):  # a quote cannot be written in MLflow's filter syntax
                continue
            key = (tracking.uri, tracking.experiment)
            if key not in clients:
                client = new_client(tracking)
                experiment = client.get_experiment_by_name(tracking.experiment)
                clients[key] = (client, experiment.experiment_id if experiment else None)
            client, experiment_id = clients[key]
            if experiment_id is None:
                continue
            runs = client.search_runs([experiment_id], filter_string=f"tags.run_folder = '{folder}'")
        except Exception as exc:  # noqa: BLE001 - one masked line for the caller's message
            raise unreachable(exc) from exc
        merged = [r.info.run_id for r in runs if r.data.tags.get("merged") == "true"]
        shards = sorted(
            (r for r in runs if r.data.tags.get("merged") != "true"), key=lambda r: r.data.tags.get("shard", "")
        )
        ids = merged[:1] or [r.info.run_id for r in shards]
        if ids:
            found[folder] = FolderRuns(client, tracking.uri, experiment_id, ids)
    return found


def log_run_figures(figures: list[tuple[Path, dict[str, float], Path]], comparison: str) -> list[tuple[str, str]]:
    """Log compare's per-run figures onto each compared run's own MLflow run(s): ``(run folder, metrics, baseline
    folder)``; the baseline's run id and folder, and ``comparison`` (where the comparison was written) become tags.
    The same metric names on every run are what lets MLflow's chart view draw one bar per run. Returns the (tracking
    URI, experiment id) pairs the runs are in; raises TrackingUnreachable."""
    from mlflow.entities import Metric, RunTag

    runs = folder_run_ids(sorted({p for f, _, b in figures for p in (f, b)}))
    now = int(time.time() * 1000)
    places: dict[tuple[str, str], None] = {}
    for folder, metrics, baseline in figures:
        if folder not in runs:
            continue
        found = runs[folder]
        tags = [RunTag("baseline_run_folder", str(baseline)), RunTag(COMPARISON_TAG, comparison)]
        if baseline in runs:
            tags.append(RunTag("baseline_run_id", runs[baseline].run_ids[0]))
        batch = [Metric(name, float(value), now, 0) for name, value in sorted(metrics.items())]
        try:
            for run_id in found.run_ids:
                found.client.log_batch(run_id, metrics=batch, tags=tags)
        except Exception as exc:  # noqa: BLE001 - one masked line for the caller's message
            raise unreachable(exc) from exc
        places[(found.uri, found.experiment_id)] = None
    return list(places)


def compared_runs_link(uri: str, experiment_id: str, comparison: str, sort_metric: str, charts: bool = False) -> str:
    """A link to MLflow's runs table (or chart view) showing one comparison's runs, flat and best first.

    MLflow's table folds a sweep's children under its parent until a filter or a metric sort is set; with both, the
    compared runs are listed on their own and each chart has one bar per run. A store that is not an HTTP server
    (sqlite) is reached through ``mlflow ui`` on its default address."""
    base = uri if uri.startswith(("http://", "https://")) else "http://127.0.0.1:5000"
    parts = urlsplit(base)
    base = urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2])).rstrip("/")  # never a credential
    query = {
        "searchFilter": f"tags.{COMPARISON_TAG} = '{comparison}'",
        "orderByKey": f"metrics.`{sort_metric}`",
        "orderByAsc": "false",
    }
    if charts:
        query["compareRunsMode"] = "CHART"
    return f"{base}/#/experiments/{experiment_id}/runs?{urlencode(query, quote_via=quote)}"
