"""One generation job end to end: config → rows → prompts → engine → Parquet + summary + MLflow.

Everything that can fail on bad input (config, data file, columns, prompt lengths, missing packages) runs before
the engine starts, so a mistake costs seconds, not a model load.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from specbatch.config import ConfigError, JobConfig, public_config, to_yaml
from specbatch.conversation import generate_rows
from specbatch.data import SourceRow, open_rows
from specbatch.embedded import ensure_embedded
from specbatch.engine import Engine, engine_fingerprint
from specbatch.environment import runtime_info
from specbatch.interrupts import StopRequested, sigterm_deferred
from specbatch.layout import RunLayout, atomic_write_json, atomic_write_text
from specbatch.locks import shard_lock
from specbatch.preflight import preflight
from specbatch.prompts import check_chat_template, load_tokenizer
from specbatch.records import write_parquet
from specbatch.review import RunIdentity, log_params, log_shard_results, run_identity
from specbatch.sharding import chunk_ranges, resolve_shard, shard_range
from specbatch.spec_metrics import Counters
from specbatch.summary import RowTotals, Summary, format_table, summarize
from specbatch.sweep import SweepJob
from specbatch.tracking import RunLogger, mlflow_run

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobResult:
    layout: RunLayout
    summary: Summary
    parquet_files: list[Path]
    # False when the run was already complete and nothing was generated.
    generated: bool


def run_job(job: JobConfig, engine: Engine | None = None, sweep: SweepJob | None = None) -> JobResult:
    """Run (or finish, or find finished) this task's shard; ``engine`` lets callers share one engine across jobs.

    Inside a Hydra multirun, ``sweep`` nests the MLflow run under the sweep's parent and tags it with the job's
    choices.

    The shard is cut into chunks of ``chunk_size`` rows; each finished chunk is written as its own Parquet part,
    so a rerun after a kill redoes at most the chunk that was in flight. The done marker is written last.
    """
    shard = resolve_shard(job.shard)
    layout = RunLayout.for_job(job, shard.index, shard.count)
    if layout.done_marker.exists():
        log.info(
            "shard %s already complete, nothing to do: %s (repeat=<n> measures it again in a new folder)",
            shard,
            layout.root,
        )
        summary = Summary(**json.loads(layout.stats_path.read_text()))
        return JobResult(layout, summary, sorted(layout.data_dir.glob("part-*.parquet")), generated=False)

    if engine is not None and engine.fingerprint != engine_fingerprint(job):
        raise ValueError("the engine passed in was built for another model/spec/engine config than this job")
    _check_run_record(layout)
    source = open_rows(job.dataset, job.max_samples)
    span = shard_range(len(source), shard)
    source.check_unique_ids(span)
    chunks = chunk_ranges(span, job.chunk_size)
    if job.model.embedded is not None:
        ensure_embedded(job.model.embedded, job.model.path)
    tokenizer = load_tokenizer(job.model)
    check_chat_template(job.dataset, tokenizer)
    preflight(job)

    with shard_lock(layout.lock_path, str(shard)):
        _remove_stale_temporaries(layout)
        todo = [n for n in range(len(chunks)) if not layout.part_path(n).exists()]
        log.info(
            "shard %s: rows %d..%d in %d chunks, %d to generate", shard, span.start, span.stop, len(chunks), len(todo)
        )
        config = public_config(job)
        info = runtime_info()
        _record_run(layout, config, info)
        identity = run_identity(config, layout, len(source))
        tags = {**identity.tags, "mlflow.source.git.commit": info["git_commit"], **info}
        tags.update(sweep.tags() if sweep else {})
        if job.model.trust_remote_code:
            log.warning(
                "model.trust_remote_code=true: code from %s's repository runs in this process; only use it for "
                "checkpoints you trust (tagged trust_remote_code=true in MLflow)",
                job.model.path,
            )
        parent = sweep.parent_run_id if sweep else None
        later = f"python jobs/log_run.py {layout.root}"
        with mlflow_run(job.tracking, identity.name, tags, identity.description, parent, later) as run:
            if run:
                log_params(run, config)
            own_engine = engine is None and bool(todo)
            if own_engine:
                engine = Engine.start(job)
            try:
                # SIGTERM (Slurm's warning before a time limit) stops the loop between chunks, never inside one.
                with sigterm_deferred() as stop_requested:
                    for done, number in enumerate(todo):
                        if stop_requested():
                            raise StopRequested(
                                f"stopped by SIGTERM after {done} of {len(todo)} chunks of shard {shard}; finished "
                                "chunks are kept: rerun the same command to generate the rest"
                            )
                        _generate_chunk(engine, source.rows(chunks[number]), job, tokenizer, layout, number, config)
            finally:
                if own_engine:
                    engine.close()
            parts = [layout.part_path(n) for n in range(len(chunks))]
            summary = _summarize_shard(layout, job, parts, engine)
            atomic_write_json(layout.stats_path, summary.to_dict())
            if run:
                log_shard_results(run, layout, summary, layout.config_yaml.read_text(), parts)
                _note_tracking(layout, run, identity, parent)
            # Written last: its presence promises every part of the shard is complete.
            atomic_write_text(layout.done_marker, time.strftime("%Y-%m-%dT%H:%M:%S%z") + "\n")
    log.info("summary of %s (shard %s)\n%s", layout.root, shard, format_table(summary))
    log.info("shard %s: %d rows (%d error rows) in %s", shard, summary.rows, summary.error_rows, layout.data_dir)
    return JobResult(layout, summary, parts, generated=bool(todo))


def _note_tracking(layout: RunLayout, run: RunLogger, identity: RunIdentity, parent: str | None) -> None:
    """When MLflow failed, leave what jobs/log_run.py needs to log the shard later; clear it when all went well."""
    pending = layout.mlflow_pending_path
    if run.failure is None:
        pending.unlink(missing_ok=True)
        return
    atomic_write_json(
        pending,
        {
            "run_id": run.run_id,
            "name": identity.name,
            "failure": run.failure,
            "parent_run_id": parent,
        },
    )
    log.warning("MLflow logging of shard %s is pending; log it with: %s", layout.shard_tag, run.later)


def _generate_chunk(
    engine: Engine,
    rows: list[SourceRow],
    job: JobConfig,
    tokenizer: Any,
    layout: RunLayout,
    number: int,
    config: dict[str, Any],
) -> None:
    batch = generate_rows(engine, rows, job, tokenizer)
    # The chunk's counters go first; the part's rename is the commit, so a part never lacks its figures.
    atomic_write_json(layout.part_stats_path(number), {"counters": asdict(batch.counters), "seconds": batch.seconds})
    write_parquet(batch.records, layout.part_path(number), config)
    log.info("chunk %d written: %d rows", number, len(batch.records))


# Row columns the summary needs (read back from every part, so a resumed shard counts its earlier chunks too).
_SUMMARY_COLUMNS = ["category", "status", "completion_tokens", "spec_steps", "draft_tokens", "accepted_tokens"]


def _summarize_shard(layout: RunLayout, job: JobConfig, parts: list[Path], engine: Engine | None) -> Summary:
    """From every part of the shard, one part at a time (memory stays flat however many rows there are)."""
    counters, seconds, totals = Counters(), 0.0, RowTotals(by_category=job.dataset.category_column is not None)
    for number, part in enumerate(parts):
        stats = json.loads(layout.part_stats_path(number).read_text())
        c = stats["counters"]
        counters = counters + Counters(**{**c, "accepted_per_position": tuple(c["accepted_per_position"])})
        seconds += stats["seconds"]
        for record in pq.read_table(part, columns=_SUMMARY_COLUMNS).to_pylist():
            totals.add(record)
    return summarize(
        counters,
        method=job.spec.method.value,
        k=job.spec.k,
        totals=totals,
        generation_seconds=seconds,
        engine_startup_seconds=engine.startup_seconds if engine else 0.0,
        warmup_seconds=engine.warmup_seconds if engine else 0.0,
    )


def _remove_stale_temporaries(layout: RunLayout) -> None:
    """Temporary files of a killed writer: never data (readers only take part-*.parquet), removed under the lock."""
    for folder in (layout.data_dir, layout.part_stats_path(0).parent):
        for tmp in folder.glob(".*.tmp-*") if folder.exists() else ():
            log.info("removing the temporary file of an interrupted writer: %s", tmp)
            tmp.unlink(missing_ok=True)


def _check_run_record(layout: RunLayout) -> None:
    """A run's shard count is fixed by its first launch: another count would cut rows differently."""
    if layout.run_json.exists():
        recorded = json.loads(layout.run_json.read_text())["shard_count"]
        if recorded != layout.shard_count:
            raise ConfigError(
                f"this run was started with shard.count={recorded}; relaunching it with shard.count="
                f"{layout.shard_count} would cut the rows differently and duplicate or lose some. Relaunch with "
                f"shard.count={recorded}, or start a new run with run_name=..."
            )


def _record_run(layout: RunLayout, config: dict[str, Any], info: dict[str, str]) -> None:
    """run.json and config.yaml describe the run folder; written once, before any data."""
    layout.root.mkdir(parents=True, exist_ok=True)
    atomic_write_text(layout.config_yaml, to_yaml(config))
    if not layout.run_json.exists():
        atomic_write_json(
            layout.run_json,
            {"config": config, "shard_count": layout.shard_count, "created_with": info},
        )
