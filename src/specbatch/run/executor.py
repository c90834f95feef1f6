"""The shard executor: the bookkeeping around a shard's generation, in one place (datatrove's executor/steps split).

It asks the shard's resume plan (specbatch.run.resume) "am I done?" first, fixes the run's shard and row counts in
the run record (refusing a relaunch with other ones), takes the shard's lock, has the plan settle what a killed
earlier launch left (stale temporaries, damaged parts, a changed source) and say which chunks are to do, then runs
the steps (specbatch.run.generate) on them, writes the shard summary and, last, the done marker. Observers (tracking)
see the run start, progress, finish and end; the steps never see the run folder's bookkeeping, only where their
chunks go.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from specbatch.common.environment import runtime_info
from specbatch.common.name_lengths import describe_name, overlong_name
from specbatch.config import ConfigError, JobConfig, public_config
from specbatch.run import resume
from specbatch.run.events import RunObserver, RunStart
from specbatch.run.folder import RunFolder
from specbatch.run.locks import shard_lock
from specbatch.run.resume import ResumePlan
from specbatch.run.shard_progress import Progress
from specbatch.run.sharding import Shard, resolve_shard
from specbatch.run.speculation_profile import rebuild_profile
from specbatch.run.summary import Summary
from specbatch.run.summary_table import format_table

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

    def generate(
        self, folder: RunFolder, config: dict[str, Any], todo: list[int], on_progress: Callable[[Progress], None]
    ) -> None:
        """Generate chunks ``todo`` on the started engine, each written into ``folder`` as it finishes, telling
        ``on_progress`` how far the shard is meanwhile."""

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
        first = resume.look(folder, public_config(self.job))
        if first.complete:
            if first.summary_problem:
                return self._rebuild_summary(first, shard)
            if first.profile_problem:
                return self._rebuild_profile(first, shard)
            log.info(
                "shard %s already complete, nothing to do: %s (repeat=<n> measures it again in a new folder)",
                shard,
                folder.root,
            )
            return _finished_result(first)
        if first.marked_done:
            log.warning(
                "shard %s was complete but has damaged parts; regenerating them: %s", shard, first.describe_damage()
            )

        self.steps.check()
        resume.check_run_record(folder)
        plan = self.steps.prepare(shard)
        start = RunStart(folder, public_config(self.job), runtime_info(), plan.source_rows, len(plan.span))
        resume.claim_run_record(start, _source_name(self.job))
        # The engine's library is imported before tracking's set-up starts on its thread (on_locked): both are
        # seconds of this process's interpreter and would only take turns at it (vLLM's import took 3 s longer
        # beside MLflow's); tracking's set-up then runs beside the engine's build, while this process waits on the
        # engine's own processes. Before the lock, so that a launch refused under it still settles the runs a killed
        # launch left (on_locked); a launch that then finds nothing to generate imported it for nothing.
        self.steps.load_engine()

        with shard_lock(folder.lock_path, str(shard)):
            again = resume.look(folder, public_config(self.job))
            if again.complete:
                # Another launch finished the shard between this one's first look and taking the lock.
                log.info("shard %s was finished by another process meanwhile; nothing to do: %s", shard, folder.root)
                return _finished_result(again)
            self.observer.on_locked(folder)
            settled = resume.settle(folder, plan.chunks, self.steps.chunk_digests(), _source_name(self.job))
            log.info(
                "shard %s: rows %d..%d in %d chunks, %d to generate",
                shard,
                plan.span.start,
                plan.span.stop,
                plan.chunks,
                len(settled.todo),
            )
            summary = self._generate(start, settled)
        log.info("summary of %s (shard %s)\n%s", folder.root, shard, format_table(summary))
        log.info("shard %s: %d rows (%d error rows) in %s", shard, summary.rows, summary.error_rows, folder.data_dir)
        return JobResult(folder, summary, settled.parts, generated=bool(settled.todo))

    def _rebuild_summary(self, plan: ResumePlan, shard: Shard) -> JobResult:
        """A finished shard whose summary file is missing or half-written: its parts are whole, so the summary is
        added up from them again (without the engine's start-up figures, which only the lost file held)."""
        folder = plan.folder
        with shard_lock(folder.lock_path, str(shard)):
            log.warning("shard %s is complete but %s: rebuilding it from the parts", shard, plan.summary_problem)
            parts = plan.finished_parts()
            summary = self.steps.summarize(folder, parts)
            resume.write_results(folder, summary, parts, public_config(self.job))
        return JobResult(folder, summary, parts, generated=False)

    def _rebuild_profile(self, plan: ResumePlan, shard: Shard) -> JobResult:
        """A finished shard whose speculation profile is damaged or missing: written again from its rows (its
        summary, which it follows, is whole and stays as it is)."""
        with shard_lock(plan.folder.lock_path, str(shard)):
            log.warning("shard %s is complete but %s: rebuilding it from the rows", shard, plan.profile_problem)
            rebuild_profile(plan.folder, public_config(self.job))
        return _finished_result(plan)

    def _generate(self, start: RunStart, plan: ResumePlan) -> Summary:
        """The chunks not written yet, then the shard summary and the done marker; observed from start to end."""
        folder, todo, parts = start.folder, plan.todo, plan.parts
        started = False
        try:
            # A shard starts in this order: the engine (seconds to minutes), then tracking's run, opened on the
            # observer's own thread while the chunks generate (MLflow's slow part, importing it and opening the
            # store, began there at on_locked, beside the engine's build).
            self.steps.start_engine(todo)
            self.observer.on_start(start)
            started = True
            self.steps.generate(folder, start.config, todo, self.observer.on_progress)
            summary = self.steps.summarize(folder, parts)
            resume.write_results(folder, summary, parts, start.config)
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


def _release_after(steps: ShardSteps, error: BaseException) -> None:
    """On the way out with ``error``, still wait for the engine's shutdown; its own failure is only logged."""
    try:
        steps.release()
    except Exception as exc:  # noqa: BLE001 - ``error`` is what the caller must see
        log.warning(
            "the engine's shutdown failed too (%s: %s) after %s", type(exc).__name__, exc, type(error).__name__
        )


def _finished_result(plan: ResumePlan) -> JobResult:
    return JobResult(plan.folder, plan.read_summary(), plan.finished_parts(), generated=False)


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


def _source_name(job: JobConfig) -> str:
    return f"dataset.path={job.dataset.path}" if job.dataset.path else f"dataset.hub_id={job.dataset.hub_id}"
