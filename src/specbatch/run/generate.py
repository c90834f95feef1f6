"""One generation job end to end: config → rows → prompts → engine → Parquet + summary + MLflow.

Everything that can fail on bad input (config, data file, columns, prompt lengths, missing packages) runs before
the engine starts, so a mistake costs seconds, not a model load.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from specbatch.assets.embedded import EmbeddedAssetError, ensure_embedded
from specbatch.assets.preflight import preflight
from specbatch.common.environment import runtime_info
from specbatch.common.files import atomic_write, atomic_write_json, atomic_write_text, create_json_once, temporaries_in
from specbatch.common.interrupts import StopRequested, sigterm_deferred
from specbatch.common.masking import mask_uri
from specbatch.config import ConfigError, JobConfig, public_config, to_yaml
from specbatch.data.prompts import check_chat_template, load_tokenizer
from specbatch.data.rows import SourceRow, open_rows
from specbatch.engine import Engine, engine_fingerprint, start_engine
from specbatch.engine.spec_metrics import Counters
from specbatch.run.folder import RunFolder
from specbatch.run.integrity import (
    PartRecord,
    changed_chunks,
    damaged_parts,
    describe_damage,
    rows_digest,
)
from specbatch.run.locks import shard_lock
from specbatch.run.records import write_parquet_file
from specbatch.run.sharding import chunk_ranges, resolve_shard, shard_range
from specbatch.run.streaming import ChunkResult, ChunkStreamer, StreamResult
from specbatch.run.summary import RowTotals, Summary, format_table, summarize
from specbatch.run.sweep import SweepJob
from specbatch.tracking.mlflow_logger import RunLogger, mark_run_killed, mlflow_run
from specbatch.tracking.review import RunIdentity, log_params, log_shard_results, run_identity

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobResult:
    folder: RunFolder
    summary: Summary
    parquet_files: list[Path]
    # False when the run was already complete and nothing was generated.
    generated: bool


def run_job(job: JobConfig, engine: Engine | None = None, sweep: SweepJob | None = None) -> JobResult:
    """Run (or finish, or find finished) this task's shard; ``engine`` lets callers share one engine across jobs.

    Inside a Hydra multirun, ``sweep`` nests the MLflow run under the sweep's parent and tags it with the job's
    choices.

    The shard is cut into chunks of ``chunk_size`` rows, all streamed through one engine (specbatch.run.streaming);
    each chunk is written as its own Parquet part as soon as its rows are finished, so a rerun after a kill redoes
    at most the chunks that were in flight. The done marker is written last.
    """
    shard = resolve_shard(job.shard)
    layout = RunFolder.for_job(job, shard.index, shard.count)
    if layout.done_marker.exists():
        damaged = damaged_parts(layout)
        if not damaged:
            log.info(
                "shard %s already complete, nothing to do: %s (repeat=<n> measures it again in a new folder)",
                shard,
                layout.root,
            )
            return _finished_result(layout)
        log.warning(
            "shard %s was complete but has damaged parts; regenerating them: %s",
            shard,
            describe_damage(layout, damaged),
        )

    if engine is not None and engine.fingerprint != engine_fingerprint(job):
        raise ValueError("the engine passed in was built for another model/spec/engine config than this job")
    _check_run_record(layout)
    source = open_rows(job.dataset, job.max_samples)
    span = shard_range(len(source), shard)
    source.check_unique_ids(span)
    chunks = chunk_ranges(span, job.chunk_size)
    if job.model.embedded is not None:
        try:
            ensure_embedded(job.model.embedded, job.model.path)
        except EmbeddedAssetError as exc:
            # A folder that is not ours, a package missing: one line saying what to do, before any model loads.
            raise ConfigError(str(exc)) from None
    tokenizer = load_tokenizer(job.model)
    check_chat_template(job.dataset, tokenizer)
    preflight(job)
    config = public_config(job)
    info = runtime_info()
    _claim_run_record(layout, config, info, len(source), job)

    with shard_lock(layout.lock_path, str(shard)):
        if layout.done_marker.exists() and not damaged_parts(layout):
            # Another launch finished the shard between this one's first look and taking the lock.
            log.info("shard %s was finished by another process meanwhile; nothing to do: %s", shard, layout.root)
            return _finished_result(layout)
        _end_killed_run(job, layout)
        _remove_stale_temporaries(layout)
        _check_source(layout, job, [rows_digest(source.rows(c)) for c in chunks])
        _drop_damaged_parts(layout)
        todo = [n for n in range(len(chunks)) if not layout.part_path(n).exists()]
        log.info(
            "shard %s: rows %d..%d in %d chunks, %d to generate", shard, span.start, span.stop, len(chunks), len(todo)
        )
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
        recorded_run = False
        try:
            with mlflow_run(job.tracking, identity.name, tags, identity.description, parent, later) as run:
                if run and run.run_id:
                    # Left behind only if this process is killed: the next launch of the shard ends the run KILLED.
                    atomic_write_json(layout.mlflow_active_path, {"run_id": run.run_id, "uri": mask_uri(run.uri)})
                    recorded_run = True
                if run:
                    log_params(run, config)
                own_engine = engine is None and bool(todo)
                if own_engine:
                    engine = start_engine(job)
                try:
                    if todo:
                        _stream(engine, job, tokenizer, layout, config, todo, lambda n: source.rows(chunks[n]))
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
        finally:
            if recorded_run:  # the run has ended (FINISHED, FAILED or KILLED) with this launch
                layout.mlflow_active_path.unlink(missing_ok=True)
    log.info("summary of %s (shard %s)\n%s", layout.root, shard, format_table(summary))
    log.info("shard %s: %d rows (%d error rows) in %s", shard, summary.rows, summary.error_rows, layout.data_dir)
    return JobResult(layout, summary, parts, generated=bool(todo))


def _finished_result(layout: RunFolder) -> JobResult:
    return JobResult(layout, layout.read_summary(), layout.parts(), generated=False)


def _note_tracking(layout: RunFolder, run: RunLogger, identity: RunIdentity, parent: str | None) -> None:
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


def _stream(
    engine: Engine,
    job: JobConfig,
    tokenizer: Any,
    layout: RunFolder,
    config: dict[str, Any],
    todo: list[int],
    rows_of: Callable[[int], list[SourceRow]],
) -> None:
    """Generate the chunks not done yet, each written as it finishes; then this launch's record of the loop.

    SIGTERM (Slurm's warning before a time limit) stops admitting chunks; the ones in flight are finished and
    written, then StopRequested ends the job without the done marker.
    """
    launch = uuid.uuid4().hex[:12]

    def write(chunk: ChunkResult) -> None:
        _write_chunk(layout, config, chunk, {"launch": launch, "concurrency": engine.concurrency})
        written.append(chunk.number)
        log.info(
            "chunk %d written: %d rows (%d of %d chunks)", chunk.number, len(chunk.records), len(written), len(todo)
        )

    written: list[int] = []
    # Rows are read when their chunk is admitted, not before: memory stays flat however long the shard.
    chunks = ((number, rows_of(number)) for number in todo)
    with sigterm_deferred() as stop_requested:
        log.info(
            "streaming %d chunks through the %s engine (up to %s requests at once; launch %s)",
            len(todo),
            job.engine.backend,
            engine.concurrency,
            launch,
        )
        streamed = ChunkStreamer(engine, job, tokenizer).run(chunks, write, stop_requested)
    _write_launch_record(layout, launch, streamed)
    if streamed.stopped:
        raise StopRequested(
            f"stopped by SIGTERM after {len(written)} of {len(todo)} chunks of shard {layout.shard_tag}; "
            "finished chunks are kept: rerun the same command to generate the rest"
        )


def _write_chunk(layout: RunFolder, config: dict[str, Any], chunk: ChunkResult, launch: dict[str, Any]) -> None:
    def write(tmp: Path) -> None:
        write_parquet_file(chunk.records, tmp, config)
        # The chunk's figures and the part's checksum go first; the part's rename is the commit, so a part never
        # lacks its figures and every later reader can tell a damaged part from a good one.
        stats = {
            "counters": asdict(chunk.counters),
            # Which launch wrote it (and at what engine concurrency), and when in that launch's loop: the time a
            # killed launch's parts took.
            **launch,
            "elapsed": chunk.elapsed,
            "part": PartRecord.of(tmp).to_dict(),
        }
        atomic_write_json(layout.part_stats_path(chunk.number), stats)

    atomic_write(layout.part_path(chunk.number), write)


def _write_launch_record(layout: RunFolder, launch: str, streamed: StreamResult) -> None:
    """The loop's wall time and engine counter differences, for the parts it wrote (absent if it was killed)."""
    record = {
        "parts": streamed.chunks,
        "seconds": streamed.seconds,
        "counters": asdict(streamed.counters) if streamed.counters is not None else None,
    }
    atomic_write_json(layout.launch_record_path(launch), record)


# Row columns the summary needs (read back from every part, so a resumed shard counts its earlier chunks too).
_SUMMARY_COLUMNS = ["category", "status", "completion_tokens", "spec_steps", "draft_tokens", "accepted_tokens"]


def _summarize_shard(layout: RunFolder, job: JobConfig, parts: list[Path], engine: Engine | None) -> Summary:
    """From every part of the shard, one part at a time (memory stays flat however many rows there are).

    Counters and seconds come from each launch's record of its loop (engine counter differences, wall time) when
    every part that launch wrote is still its own; otherwise (a killed launch, a part regenerated since) from the
    parts' own figures and the time the launch took up to its last part.
    """
    totals = RowTotals(by_category=job.dataset.category_column is not None)
    by_launch: dict[str | None, list[dict[str, Any]]] = defaultdict(list)
    for number, part in enumerate(parts):
        stats = json.loads(layout.part_stats_path(number).read_text())
        by_launch[stats.get("launch")].append({**stats, "number": number})
        for record in pq.read_table(part, columns=_SUMMARY_COLUMNS).to_pylist():
            totals.add(record)
    counters, seconds = Counters(), 0.0
    concurrency = max((s.get("concurrency") or 0 for stats in by_launch.values() for s in stats), default=0)
    for launch, stats in by_launch.items():
        record = _read_launch_record(layout, launch)
        own = record is not None and sorted(record["parts"]) == sorted(s["number"] for s in stats)
        if own and record["counters"] is not None:
            counters = counters + Counters.from_dict(record["counters"])
        else:
            for s in stats:
                counters = counters + Counters.from_dict(s["counters"])
        if own:
            seconds += record["seconds"]
        elif launch is None:  # parts written before streaming: each chunk's own generate time
            seconds += sum(s["seconds"] for s in stats)
        else:
            seconds += max(s["elapsed"] for s in stats)
    return summarize(
        counters,
        method=job.spec.method.value,
        k=job.spec.k,
        totals=totals,
        generation_seconds=seconds,
        engine_startup_seconds=engine.startup_seconds if engine else 0.0,
        warmup_seconds=engine.warmup_seconds if engine else 0.0,
        concurrency=concurrency or None,
    )


def _read_launch_record(layout: RunFolder, launch: str | None) -> dict[str, Any] | None:
    path = layout.launch_record_path(launch) if launch else None
    return json.loads(path.read_text()) if path is not None and path.exists() else None


def _remove_stale_temporaries(layout: RunFolder) -> None:
    """Temporary files of a killed writer: never data (readers only take part-*.parquet), removed under the lock."""
    for folder in (layout.data_dir, layout.part_stats_path(0).parent):
        for tmp in temporaries_in(folder):
            log.info("removing the temporary file of an interrupted writer: %s", tmp)
            tmp.unlink(missing_ok=True)


def _check_run_record(layout: RunFolder) -> None:
    """A run's shard count is fixed by its first launch: another count would cut rows differently."""
    if layout.run_json.exists():
        _refuse_other_count(layout, json.loads(layout.run_json.read_text()))


def _refuse_other_count(layout: RunFolder, record: dict[str, Any]) -> None:
    recorded = record["shard_count"]
    if recorded != layout.shard_count:
        raise ConfigError(
            f"this run was started with shard.count={recorded}; relaunching it with shard.count="
            f"{layout.shard_count} would cut the rows differently and duplicate or lose some. Relaunch with "
            f"shard.count={recorded}, or start a new run with run_name=..."
        )


def _claim_run_record(
    layout: RunFolder, config: dict[str, Any], info: dict[str, str], source_rows: int, job: JobConfig
) -> None:
    """run.json fixes the run's shard count and row count; the first launch's record wins, atomically.

    Two launches racing with different shard counts both find no run.json at their first look; only one of them
    can create it, and the other is refused here, before it writes anything.
    """
    record = {"config": config, "shard_count": layout.shard_count, "source_rows": source_rows, "created_with": info}
    if create_json_once(layout.run_json, record):
        atomic_write_text(layout.config_yaml, to_yaml(config))
        return
    recorded = json.loads(layout.run_json.read_text())
    _refuse_other_count(layout, recorded)
    before = recorded.get("source_rows")
    if before is not None and before != source_rows:
        raise ConfigError(
            f"{_source_name(job)} now gives {source_rows} rows, but this run started with {before}: the shards "
            "would cut the rows differently and repeat or lose some. Restore the data as it was to finish this run, "
            f"or start a new run of the new data with run_name=<new name> (this run stays in {layout.root})"
        )
    if not layout.config_yaml.exists():
        atomic_write_text(layout.config_yaml, to_yaml(config))


def _source_name(job: JobConfig) -> str:
    return f"dataset.path={job.dataset.path}" if job.dataset.path else f"dataset.hub_id={job.dataset.hub_id}"


def _check_source(layout: RunFolder, job: JobConfig, digests: list[str]) -> None:
    """Refuse to resume over source rows that changed since the shard started; record them on its first start."""
    recorded = layout.read_source_record()
    has_parts = bool(layout.part_numbers())
    if recorded is not None and has_parts:
        changed = changed_chunks(recorded, digests)
        if changed:
            first = changed[0]
            raise ConfigError(
                f"{_source_name(job)} changed since shard {layout.shard_index}/{layout.shard_count} of this run "
                f"started: the rows of chunk {first} (and {len(changed) - 1} more chunk(s)) are not what they were, "
                "so resuming would mix two versions of the data (rows twice, rows missing). Restore the file as it "
                f"was to finish this run, or start a new run of the new data with run_name=<new name> (the finished "
                f"parts stay in {layout.root})"
            )
        return
    if recorded is None and has_parts:
        log.info(
            "shard %s has parts from before source records existed; recording the source as it is now",
            layout.shard_tag,
        )
    atomic_write_json(layout.source_record_path, {"chunks": digests})


def _drop_damaged_parts(layout: RunFolder) -> None:
    """A part that is not as it was written is regenerated: it and its stats are the job's own files."""
    damaged = damaged_parts(layout, layout.part_numbers())
    if not damaged:
        return
    log.warning("damaged parts are regenerated: %s", describe_damage(layout, damaged))
    # The shard is no longer complete until they are written again.
    layout.done_marker.unlink(missing_ok=True)
    for number in damaged:
        layout.part_path(number).unlink(missing_ok=True)
        layout.part_stats_path(number).unlink(missing_ok=True)


def _end_killed_run(job: JobConfig, layout: RunFolder) -> None:
    """An MLflow run left RUNNING by a killed launch of this shard is ended KILLED (it can never finish)."""
    path = layout.mlflow_active_path
    if not path.exists():
        return
    run_id = json.loads(path.read_text())["run_id"]
    if not job.tracking.enabled or not mark_run_killed(job.tracking, run_id):
        return  # keep the record: a later launch that reaches the store ends the run
    path.unlink(missing_ok=True)
