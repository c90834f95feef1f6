"""What a shard's MLflow run shows, built from the run folder alone: the job logs it live, jobs/log_run.py later.

A readable name that leads with what differs inside an experiment (``ngram-k3 · bs16 [· rep1] [· shard 3/8] ·
<model>``; the batch size is settled from the engine's own figure when the shard finishes), a description, tags to
filter on, the resolved config as params, the summary as metrics (per-position acceptance stepped by position), the
output Parquet as the run's dataset input (named by its data set), a sample of completions as a table, and the
acceptance plot for speculative runs.
"""

from __future__ import annotations

import hashlib
import json
import logging
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from specbatch.common.png import pyplot, save_png
from specbatch.config import spec_caption, spec_label
from specbatch.engine import recorded_backend
from specbatch.engine.acceptance_settings import as_params
from specbatch.run.folder import RunFolder, read_run, shard_folders
from specbatch.run.records.replica_figures import read_all_replica_figures
from specbatch.run.summary import Summary
from specbatch.tracking.logger import RunLogger, flatten
from specbatch.tracking.store import open_client, recorded_tracking

log = logging.getLogger(__name__)

# Completions shown in the run's table artifact, and how much of each text cell.
SAMPLE_ROWS = 20
SAMPLE_CHARS = 2000
SAMPLE_COLUMNS = ["row_id", "turn", "sample_index", "category", "status", "error", "prompt", "completion"]
SAMPLE_NUMBERS = ["prompt_tokens", "completion_tokens", "acceptance_length", "finish_reason"]


@dataclass(frozen=True)
class RunIdentity:
    name: str
    description: str
    tags: dict[str, str]


def batch_caption(config: dict[str, Any], prompts: int | None = None, concurrency: int | None = None) -> str:
    """``bs<n>``: the requests the engine ran at once, as jobs/compare.py counts the batch size (the engine's
    concurrency, or fewer when the shard has fewer prompts). ``concurrency`` is what the engine reported (in the
    summary); before it is known, ``engine.max_num_seqs`` stands in. ``full batch`` when neither is known."""
    sizes = [s for s in (concurrency or config["engine"].get("max_num_seqs"), prompts) if s]
    return f"bs{min(sizes)}" if sizes else "full batch"


def run_name(
    config: dict[str, Any],
    folder: RunFolder | None,
    prompts: int | None = None,
    concurrency: int | None = None,
    part: str | None = None,
) -> str:
    """What differs between the runs of one experiment comes first, so the runs table can tell them apart when
    it cuts names short: ``ngram-k3 · bs16 [· rep1] [· shard 3/8] · <model>``. The data set is the experiment's
    (specbatch/<data set>); the model closes the name because one experiment may hold several. ``part`` replaces the
    shard (e.g. ``merged``)."""
    spec = config["spec"]
    parts = [spec_label(spec["method"], spec["num_speculative_tokens"], spec["k_schedule"])]
    parts.append(batch_caption(config, prompts, concurrency))
    if config["repeat"]:
        parts.append(f"rep{config['repeat']}")
    if part:
        parts.append(part)
    elif folder is not None and folder.shard_count > 1:
        parts.append(f"shard {folder.shard_index}/{folder.shard_count}")
    parts.append(config["model"]["name"])
    return " · ".join(parts)


def run_identity(
    config: dict[str, Any], folder: RunFolder, rows: int | None = None, shard_rows: int | None = None
) -> RunIdentity:
    """Name, description and tags of a shard's run, from the run's (masked) plain config; ``rows`` are the data
    set's rows (every shard), ``shard_rows`` this shard's (they cap its batch size in the name)."""
    spec = config["spec"]
    k, schedule = spec["num_speculative_tokens"], spec["k_schedule"]
    label = spec_label(spec["method"], k, schedule)
    model, dataset = config["model"]["name"], config["dataset"]["name"]
    shard = f"{folder.shard_index}/{folder.shard_count}"
    name = run_name(config, folder, shard_rows)
    of_rows = f" of {rows} rows" if rows is not None else ""
    description = (
        f"**{label}** on `{config['model']['path']}` ({config['model']['dtype']}, model `{model}`), "
        f"{batch_caption(config, shard_rows)}, shard {shard}{of_rows} of "
        f"data set `{dataset}`, {config['sampling']['max_tokens']} max new tokens, "
        f"temperature {config['sampling']['temperature']}.\n\nOutputs: `{folder.root}`"
    )
    backend = recorded_backend(config)
    if note := backend.describe(config["engine"]):
        description += f"\n\n{note}"
    tags = {
        "method": spec["method"],
        # A schedule's k is its largest; the k_schedule tag says it varies with the batch size.
        "k": str(k) if k is not None else "none",
        "model": model,
        "dataset": dataset,
        "dtype": str(config["model"]["dtype"]),
        "shard": shard,
        "repeat": str(config["repeat"]),
        "run_folder": str(folder.root),
        "engine": backend.name,
    }
    if schedule:
        tags["k_schedule"] = spec_caption(spec["method"], k, schedule).removeprefix(f"{spec['method']} k schedule ")
    if config["model"].get("trust_remote_code"):
        tags["trust_remote_code"] = "true"
    return RunIdentity(name, description, tags)


def first_turn_prompts(parts: list[Path]) -> int:
    """The shard's prompts: its rows of turn 1, sample 0 (each row of the data set has exactly one)."""
    count = 0
    for part in parts:
        table = pq.read_table(part, columns=["turn", "sample_index"]).to_pydict()
        count += sum(t == 1 and s == 0 for t, s in zip(table["turn"], table["sample_index"], strict=True))
    return count


def log_shard_results(
    run: RunLogger,
    folder: RunFolder,
    summary: Summary,
    config_yaml: str,
    parts: list[Path],
    config: dict[str, Any],
) -> None:
    """Everything of a finished shard except params (logged when the run starts). The run's name is settled with
    the batch size the engine reported (the start could only name the configured one)."""
    if summary.concurrency:
        run.set_tag("mlflow.runName", run_name(config, folder, first_turn_prompts(parts), summary.concurrency))
    run.log_summary(summary)
    # Beside the config's params: what the engine resolved of the settings that change acceptance silently.
    run.log_params(as_params(summary.acceptance_settings))
    if summary.counters_scope:
        # "server": drafts and acceptance are the server's, every client's (SERVER_WIDE_NOTE).
        run.set_tag("counters_scope", summary.counters_scope)
    run.log_text(config_yaml, "config.yaml")
    run.log_text(json.dumps(summary.to_dict(), indent=2), "summary.json")
    run.log_dataset(parquet_dataset(folder, parts, config["dataset"]["name"]), context="output")
    run.log_table(completion_sample(parts), "completions_sample.json")
    if folder.profile_path.is_file():
        run.log_artifact(folder.profile_path, "speculation_profile")
    decision = folder.read_decision()
    if decision is not None:
        log_decision(run, decision)
    log_replicas(run, read_all_replica_figures(folder.stats_dir))
    if summary.acceptance_rate_per_position:
        with tempfile.TemporaryDirectory() as tmp:
            run.log_artifact(plot_run_acceptance(summary, Path(tmp) / "acceptance_by_position.png"))


# What each Ray replica's metrics are (replica_<n>/<name>), from its figures (specbatch.run.records.replica_figures).
_REPLICA_METRICS = ("chunks", "rows", "output_tokens", "output_tok_s", "acceptance_length", "startup_seconds")


def log_replicas(run: RunLogger, replicas: list[dict[str, Any]]) -> None:
    """A Ray launch's replicas (launcher=ray), each with its own figures beside the run's, which add up all of
    theirs: a table (one row per replica, every launch's) and replica_<n>/* metrics; nothing for a local launch."""
    if not replicas:
        return
    run.set_tag("launcher", "ray")
    run.log_table({key: [r.get(key) for r in replicas] for key in replicas[0]}, "ray_replicas.json")
    metrics = {}
    for number, replica in enumerate(replicas):
        for name in _REPLICA_METRICS:
            if replica.get(name) is not None:
                metrics[f"replica_{number}/{name}"] = float(replica[name])
    run.log_metrics(metrics)


# The columns of spec=auto's candidates table in MLflow (decision.json's candidates, one row each).
_DECISION_COLUMNS = (
    "setup",
    "predicted_acceptance_length",
    "predicted_speedup",
    "measured_tok_s",
    "speedup",
    "spread",
)


def log_decision(run: RunLogger, decision: dict[str, Any]) -> None:
    """spec=auto's decision (specbatch.auto): its candidates as a table, the winner and why as tags, the file."""
    rows = decision["candidates"]
    run.log_table({column: [row.get(column) for row in rows] for column in _DECISION_COLUMNS}, "auto_decision.json")
    run.set_tag("auto.winner", decision["winner"])
    # How people read it: "auto → ngram, k 3 below batch 8, 1 up to 32, off above".
    run.set_tag("auto.chose", f"auto → {decision['winner_caption']}")
    if decision.get("schedule"):
        buckets = decision["schedule"]
        table = {column: [row.get(column) for row in buckets] for column in buckets[0]}
        run.log_table(table, "auto_schedule.json")
    run.set_tag("auto.why", decision["why"])
    run.set_tag("auto.measured", str(decision["measured"]).lower())
    run.log_text(json.dumps(decision, indent=2), "decision.json")


def plot_run_acceptance(summary: Summary, path: Path) -> Path:
    """One run's acceptance rate at each draft position (bars), for its MLflow page."""
    plt = pyplot()
    rates = summary.acceptance_rate_per_position or []
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.bar(range(1, len(rates) + 1), rates, color="tab:blue")
    label = spec_caption(summary.method, summary.num_speculative_tokens)
    al = summary.mean_acceptance_length
    ax.set(
        xlabel="draft position",
        ylabel="acceptance rate",
        ylim=(0, 1.05),
        title=f"{label}: AL {al:.2f}" if al is not None else label,
    )
    ax.grid(alpha=0.3, axis="y")
    return save_png(fig, plt, path)


def log_params(run: RunLogger, config: dict[str, Any]) -> None:
    run.log_params(flatten(config))


def parquet_dataset(folder: RunFolder, parts: list[Path], dataset: str) -> Any:
    """The shard's Parquet folder as an MLflow dataset (metadata only: MLflow never copies the rows)."""
    from mlflow.data.dataset_source_registry import resolve_dataset_source
    from mlflow.data.meta_dataset import MetaDataset

    # Digest of the parts' names and sizes: cheap, and changes whenever the data does.
    digest = hashlib.sha256("".join(f"{p.name}:{p.stat().st_size};" for p in parts).encode()).hexdigest()[:16]
    # Named by the data set it holds the completions of (the runs table's Dataset column), not by the folder.
    name = dataset if folder.shard_count == 1 else f"{dataset} shard {folder.shard_index}/{folder.shard_count}"
    with warnings.catch_warnings():
        # MLflow registers its local-file source twice and warns that a path matches both (they are the same).
        warnings.simplefilter("ignore", UserWarning)
        source = resolve_dataset_source(str(folder.data_dir))
    return MetaDataset(source=source, name=name, digest=digest)


def completion_sample(parts: list[Path], limit: int = SAMPLE_ROWS) -> dict[str, list[Any]]:
    """The first rows of the shard as columns (texts cut to SAMPLE_CHARS), for MLflow's table view."""
    columns = SAMPLE_COLUMNS + SAMPLE_NUMBERS
    table: dict[str, list[Any]] = {c: [] for c in columns}
    for part in parts:
        for row in pq.read_table(part, columns=columns).to_pylist():
            if len(table["row_id"]) >= limit:
                return table
            for column in columns:
                value = row[column]
                table[column].append(value[:SAMPLE_CHARS] if isinstance(value, str) else value)
    return table


def log_pending(root: Path, uri: str | None = None, every_shard: bool = False) -> list[str]:
    """Log the finished shards of a run folder whose MLflow logging failed (or every finished shard).

    Continues the shard's MLflow run when the store has it (the job created it before the server went away),
    else creates it; returns the run ids. Raises when the store cannot be reached: nothing is marked logged then.
    """
    config = read_run(root)["config"]
    tracking = recorded_tracking(config["tracking"], uri)
    if not tracking.enabled:
        raise ValueError(f"{root} was run with tracking=off: pass --tracking-uri to log it somewhere")
    client, experiment_id = open_client(tracking)
    logged = []
    for folder in shard_folders(root):
        pending = folder.mlflow_pending_path
        if not folder.is_done():
            log.info("shard %s is not finished: not logged (finish it first)", folder.shard_tag)
            continue
        if not pending.exists() and not every_shard:
            continue
        record = folder.read_pending_note() or {}
        identity = run_identity(config, folder)
        run_id = record.get("run_id")
        if run_id is None or not _run_exists(client, run_id):
            tags = {**identity.tags, "mlflow.note.content": identity.description, "logged_later": "true"}
            if record.get("parent_run_id"):
                tags["mlflow.parentRunId"] = record["parent_run_id"]
            run_id = client.create_run(experiment_id, run_name=identity.name, tags=tags).info.run_id
        run = RunLogger(client, run_id, experiment_id, tracking.uri, later=f"python jobs/log_run.py {root}")
        summary = folder.read_summary()
        parts = folder.parts()
        log_params(run, config)
        log_shard_results(run, folder, summary, folder.read_config_yaml(), parts, config)
        run.terminate("FINISHED")
        if run.failure:
            raise RuntimeError(f"logging shard {folder.shard_tag} of {root} failed: {run.failure}")
        pending.unlink(missing_ok=True)
        log.info("logged shard %s as MLflow run %s (%s)", folder.shard_tag, run_id, identity.name)
        logged.append(run_id)
    return logged


def _run_exists(client: Any, run_id: str) -> bool:
    from mlflow.exceptions import MlflowException

    try:
        client.get_run(run_id)
    except MlflowException:
        return False
    return True
