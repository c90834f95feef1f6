"""What compare reads from and writes to MLflow: the runs nested under a sweep's parent, each compared run folder's
own runs (its merged run, else its shard runs), the per-run figures logged onto them, and the link to the runs
table that shows one comparison. Every failure to reach a store is one masked TrackingUnreachable line.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit, urlunsplit

from specbatch.run.folder import read_run
from specbatch.tracking.logger import RunLogger
from specbatch.tracking.store import children_of, new_client, recorded_tracking, unreachable

# The tag compare sets on each compared run: where the comparison was written (a filter for its runs in the UI).
COMPARISON_TAG = "comparison"


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


def log_run_figures(
    figures: list[tuple[Path, dict[str, float], Path, dict[str, str]]], comparison: str
) -> list[tuple[str, str]]:
    """Log compare's per-run figures onto each compared run's own MLflow run(s): ``(run folder, metrics, baseline
    folder, tags)``; the baseline's run id and folder, and ``comparison`` (where the comparison was written) become
    tags too.
    The same metric names on every run are what lets MLflow's chart view draw one bar per run. Returns the (tracking
    URI, experiment id) pairs the runs are in; raises TrackingUnreachable."""
    from mlflow.entities import Metric, RunTag

    runs = folder_run_ids(sorted({p for f, _, b, _ in figures for p in (f, b)}))
    now = int(time.time() * 1000)
    places: dict[tuple[str, str], None] = {}
    for folder, metrics, baseline, own_tags in figures:
        if folder not in runs:
            continue
        found = runs[folder]
        tags = [RunTag("baseline_run_folder", str(baseline)), RunTag(COMPARISON_TAG, comparison)]
        tags += [RunTag(key, value) for key, value in sorted(own_tags.items())]
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
