"""The shard executor: the bookkeeping around a shard's generation, in one place (datatrove's executor/steps split).

It asks "am I done?" first, fixes the run's shard and row counts in the run record (refusing a relaunch with other
ones), takes the shard's lock, settles what a killed earlier launch left (stale temporaries, damaged parts, a changed
source), then runs the steps (specbatch.run.generate) on the chunks not written yet, writes the shard summary and,
last, the done marker. Observers (tracking) see the run start, finish and end; the steps never see the run folder's
bookkeeping, only where their chunks go.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from specbatch.common.atomic_files import atomic_write_json, atomic_write_text
from specbatch.common.environment import runtime_info
from specbatch.common.name_lengths import describe_name, overlong_name
from specbatch.config import ConfigError, JobConfig, public_config, to_yaml
from specbatch.run.events import RunObserver, RunStart
from specbatch.run.folder import RunFolder
from specbatch.run.integrity import changed_chunks, damaged_parts, describe_damage
from specbatch.run.locks import shard_lock
from specbatch.run.sharding import Shard, resolve_shard
from specbatch.run.speculation_profile import speculation_profile
from specbatch.run.summary import Summary, format_table

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobResult:
    folder: RunFolder
    summary: Summary
    parquet_files: list[Path]
    # False when the run was already complete and nothing was generated.
    generated: bool


@dataclass(frozen=True)
class ShardPlan:
    """What the steps found when they prepared a shard."""

    # Rows of the whole data set, the shard's rows among them, and how many chunks those are cut into.
    source_rows: int
    span: range
    chunks: int


class ShardSteps(Protocol):
    """The generation of a shard, as the executor runs it (specbatch.run.generate.ShardGeneration)."""

    def check(self) -> None:
        """Refuse what the caller handed in that cannot work, before anything is read."""

    def prepare(self, shard: Shard) -> ShardPlan:
        """Everything that can fail on bad input (data, assets, tokenizer, preflight), before the engine starts."""
        ...

    def chunk_digests(self) -> list[str]:
        """A digest of each chunk's source rows, to refuse resuming over changed data."""
        ...

    def load_engine(self) -> None:
        """Import the engine's library into this process when no engine was handed in (Engine.import_library), so
        that start_engine is left with the build."""

    def start_engine(self, todo: list[int]) -> None:
        """Build and warm up the engine when chunks ``todo`` need one and none was handed in."""

    def generate(self, folder: RunFolder, config: dict[str, Any], todo: list[int]) -> None:
        """Generate chunks ``todo`` on the started engine, each written into ``folder`` as it finishes."""

    def summarize(self, folder: RunFolder, parts: list[Path]) -> Summary:
        """The shard summary, from all of its parts."""
        ...

    def release(self) -> None:
        """Wait for what generate() left running in the background (the engine's shutdown); raise its error."""


class ShardExecutor:
    """Runs (or finishes, or finds finished) this task's shard of ``job`` with ``steps``, watched by ``observer``."""

    def __init__(self, job: JobConfig, steps: ShardSteps, observer: RunObserver) -> None:
        self.job, self.steps, self.observer = job, steps, observer

    def run(self) -> JobResult:
        shard = resolve_shard(self.job.shard)
        folder = RunFolder.for_job(self.job, shard.index, shard.count)
        _check_names(self.job, folder)
        if folder.is_done():
            damaged = damaged_parts(folder)
            if not damaged:
                problem = folder.summary_problem()
                if problem:
                    return self._rebuild_summary(folder, shard, problem)
                log.info(
                    "shard %s already complete, nothing to do: %s (repeat=<n> measures it again in a new folder)",
                    shard,
                    folder.root,
                )
                return _finished_result(folder)
            log.warning(
                "shard %s was complete but has damaged parts; regenerating them: %s",
                shard,
                describe_damage(folder, damaged),
            )

        self.steps.check()
        _check_run_record(folder)
        # A damaged record (source digests, spec=auto's decision or plan) is refused in one line now, before the steps
        # start.
        folder.check_records()
        plan = self.steps.prepare(shard)
        start = RunStart(folder, public_config(self.job), runtime_info(), plan.source_rows, len(plan.span))
        _claim_run_record(start, self.job)
        # The engine's library is imported before tracking's set-up starts on its thread (on_locked): both are
        # seconds of this process's interpreter and would only take turns at it (vLLM's import took 3 s longer
        # beside MLflow's); tracking's set-up then runs beside the engine's build, while this process waits on the
        # engine's own processes. Before the lock, so that a launch refused under it still settles the runs a killed
        # launch left (on_locked); a launch that then finds nothing to generate imported it for nothing.
        self.steps.load_engine()

        with shard_lock(folder.lock_path, str(shard)):
            if folder.is_done() and not damaged_parts(folder):
                # Another launch finished the shard between this one's first look and taking the lock.
                log.info("shard %s was finished by another process meanwhile; nothing to do: %s", shard, folder.root)
                return _finished_result(folder)
            self.observer.on_locked(folder)
            folder.remove_stale_temporaries()
            _check_source(folder, self.job, self.steps.chunk_digests())
            _drop_damaged_parts(folder)
            todo = [n for n in range(plan.chunks) if not folder.part_path(n).exists()]
            log.info(
                "shard %s: rows %d..%d in %d chunks, %d to generate",
                shard,
                plan.span.start,
                plan.span.stop,
                plan.chunks,
                len(todo),
            )
            parts = [folder.part_path(n) for n in range(plan.chunks)]
            summary = self._generate(start, todo, parts)
        log.info("summary of %s (shard %s)\n%s", folder.root, shard, format_table(summary))
        log.info("shard %s: %d rows (%d error rows) in %s", shard, summary.rows, summary.error_rows, folder.data_dir)
        return JobResult(folder, summary, parts, generated=bool(todo))

    def _rebuild_summary(self, folder: RunFolder, shard: Shard, problem: str) -> JobResult:
        """A finished shard whose summary file is missing or half-written: its parts are whole, so the summary is
        added up from them again (without the engine's start-up figures, which only the lost file held)."""
        with shard_lock(folder.lock_path, str(shard)):
            log.warning("shard %s is complete but %s: rebuilding it from the parts", shard, problem)
            parts = folder.parts()
            summary = self.steps.summarize(folder, parts)
            folder.write_summary(summary)
            _write_profile(folder, parts, public_config(self.job), summary)
        return JobResult(folder, summary, parts, generated=False)

    def _generate(self, start: RunStart, todo: list[int], parts: list[Path]) -> Summary:
        """The chunks not written yet, then the shard summary and the done marker; observed from start to end."""
        folder = start.folder
        started = False
        try:
            # A shard starts in this order: the engine (seconds to minutes), then tracking's run, opened on the
            # observer's own thread while the chunks generate (MLflow's slow part, importing it and opening the
            # store, began there at on_locked, beside the engine's build).
            self.steps.start_engine(todo)
            self.observer.on_start(start)
            started = True
            self.steps.generate(folder, start.config, todo)
            summary = self.steps.summarize(folder, parts)
            folder.write_summary(summary)
            _write_profile(folder, parts, start.config, summary)
            self.observer.on_finish(summary, parts)
            # The engine's processes are gone before the shard counts as done (and a failed shutdown leaves it
            # not done, as when the engine was closed inside generate).
            self.steps.release()
            folder.mark_done()
        except BaseException as exc:
            if not started:
                # An engine that failed to start (or a stop signal meanwhile) still leaves a run, ended with why;
                # a tracking failure on top of it is only logged: ``exc`` is what the caller must see.
                try:
                    self.observer.on_start(start)
                except Exception as tracking_error:  # noqa: BLE001
                    log.warning(
                        "could not record the failed start: %s: %s", type(tracking_error).__name__, tracking_error
                    )
            _release_after(self.steps, exc)
            self.observer.on_end(exc)
            raise
        self.observer.on_end(None)
        return summary


def _write_profile(folder: RunFolder, parts: list[Path], config: dict[str, Any], summary: Summary) -> None:
    """The shard's speculation profile among its records (none for spec=none, without per-row figures, or when the
    shard summary refused them)."""
    profile = speculation_profile(parts, config, summary)
    if profile is not None:
        atomic_write_json(folder.profile_path, profile)
    else:  # one a rebuilt summary no longer stands behind
        folder.profile_path.unlink(missing_ok=True)


def _release_after(steps: ShardSteps, error: BaseException) -> None:
    """On the way out with ``error``, still wait for the engine's shutdown; its own failure is only logged."""
    try:
        steps.release()
    except Exception as exc:  # noqa: BLE001 - ``error`` is what the caller must see
        log.warning(
            "the engine's shutdown failed too (%s: %s) after %s", type(exc).__name__, exc, type(error).__name__
        )


def _finished_result(folder: RunFolder) -> JobResult:
    return JobResult(folder, folder.read_summary(), folder.parts(), generated=False)


def _check_names(job: JobConfig, folder: RunFolder) -> None:
    """A name in the run folder's path longer than its file system takes is refused now, naming where it comes from
    and how to shorten it: the OS would refuse it only when the run record is written, after the model has loaded.
    (The names inside a run folder are short and fixed.)"""
    found = overlong_name(folder.root)
    if found is None:
        return
    name, limit = found
    # <output_root>/runs/<dataset.name>/<model.name>/<run_name or spec label>-<digest>
    where = len(folder.root.parts) - folder.root.parts.index(name)
    if where == 1:
        source = "run_name" if job.run_name else f"the spec label {job.spec.label[:40]}..."
        fix = f"the run folder's own name, from {source}: set run_name=<a shorter name> to name it instead"
    elif where in (2, 3):
        key = "model.name" if where == 2 else "dataset.name"
        fix = f"from {key}: choose a shorter {key}"
    else:
        fix = f"in output_root={job.output_root}: choose a shorter output_root"
    raise ConfigError(
        f"the run folder {folder.root} has a name of {describe_name(name)}, more than the {limit} bytes its file "
        f"system takes ({fix})"
    )


def _check_run_record(folder: RunFolder) -> None:
    """A run's shard count is fixed by its first launch: another count would cut rows differently."""
    if folder.run_json.exists():
        _refuse_other_count(folder, folder.read_run_record())


def _refuse_other_count(folder: RunFolder, record: dict[str, Any]) -> None:
    recorded = record["shard_count"]
    if recorded != folder.shard_count:
        raise ConfigError(
            f"this run was started with shard.count={recorded}; relaunching it with shard.count="
            f"{folder.shard_count} would cut the rows differently and duplicate or lose some. Relaunch with "
            f"shard.count={recorded}, or start a new run with run_name=..."
        )


def _claim_run_record(start: RunStart, job: JobConfig) -> None:
    """run.json fixes the run's shard count and row count; the first launch's record wins, atomically.

    Two launches racing with different shard counts both find no run.json at their first look; only one of them
    can create it, and the other is refused here, before it writes anything.
    """
    folder, config, source_rows = start.folder, start.config, start.source_rows
    record = {
        "config": config,
        "shard_count": folder.shard_count,
        "source_rows": source_rows,
        "created_with": start.runtime,
    }
    if folder.claim_run_record(record):
        atomic_write_text(folder.config_yaml, to_yaml(config))
        return
    recorded = folder.read_run_record()
    _refuse_other_count(folder, recorded)
    before = recorded.get("source_rows")
    if before is not None and before != source_rows:
        raise ConfigError(
            f"{_source_name(job)} now gives {source_rows} rows, but this run started with {before}: the shards "
            "would cut the rows differently and repeat or lose some. Restore the data as it was to finish this run, "
            f"or start a new run of the new data with run_name=<new name> (this run stays in {folder.root})"
        )
    if not folder.config_yaml.exists():
        atomic_write_text(folder.config_yaml, to_yaml(config))


def _source_name(job: JobConfig) -> str:
    return f"dataset.path={job.dataset.path}" if job.dataset.path else f"dataset.hub_id={job.dataset.hub_id}"


def _check_source(folder: RunFolder, job: JobConfig, digests: list[str]) -> None:
    """Refuse to resume over source rows that changed since the shard started; record them on its first start."""
    recorded = folder.read_source_record()
    has_parts = bool(folder.part_numbers())
    if recorded is not None and has_parts:
        changed = changed_chunks(recorded, digests)
        if changed:
            first = changed[0]
            raise ConfigError(
                f"{_source_name(job)} changed since shard {folder.shard_index}/{folder.shard_count} of this run "
                f"started: the rows of chunk {first} (and {len(changed) - 1} more chunk(s)) are not what they were, "
                "so resuming would mix two versions of the data (rows twice, rows missing). Restore the file as it "
                f"was to finish this run, or start a new run of the new data with run_name=<new name> (the finished "
                f"parts stay in {folder.root})"
            )
        return
    if recorded is None and has_parts:
        log.info(
            "shard %s has parts from before source records existed; recording the source as it is now",
            folder.shard_tag,
        )
    atomic_write_json(folder.source_record_path, {"chunks": digests})


def _drop_damaged_parts(folder: RunFolder) -> None:
    """A part that is not as it was written is regenerated: it and its stats are the job's own files."""
    damaged = damaged_parts(folder, folder.part_numbers())
    if not damaged:
        return
    log.warning("damaged parts are regenerated: %s", describe_damage(folder, damaged))
    # The shard is no longer complete until they are written again.
    folder.unmark_done()
    for number in damaged:
        folder.drop_part(number)
