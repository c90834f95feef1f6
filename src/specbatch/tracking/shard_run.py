"""MLflow as an observer of a shard run (specbatch.run.events): the shard's MLflow run opens when generation
starts, receives the shard's results when it finishes, and ends with it: FINISHED, FAILED, or KILLED when SIGTERM
stopped it. Tracking never stops the job (logger.RunLogger turns inert on the first failure).

A killed process cannot end its MLflow run, so while the run is open its id stays in the run folder
(``mlflow_active``) and the next launch of the shard ends that run KILLED. When MLflow failed, a pending note
(``mlflow_pending``) tells jobs/log_run.py what to log later.

Tracking costs seconds before the run exists (importing mlflow, opening or creating the store), none of which the
engine needs: that starts on a worker thread once the shard's lock is held and the engine's library imported
(on_locked), beside the engine's build; the run itself opens once the engine is up (on_start), on the same thread,
while the chunks generate. Every later MLflow call of the run goes to that thread in event order (one thread uses the
client). The executor sees each event finished when it returns, except those two: on_finish and on_end wait for them
first and raise what on_start raised.

While the shard generates, its progress (specbatch.run.shard_progress) becomes step metrics of the run, so the UI
draws a live curve: ``progress/<figure>`` stepped by the shard's rows done (a resumed shard's steps go on from the
rows its earlier launches wrote). They go to the same thread without waiting; while a report still waits there
for its turn (a slow store), a newer one takes its place instead of queueing behind it, so the job never waits for
MLflow, nothing piles up, and the last report (the shard's end) is always logged. A store that fails makes the
logger inert, as any failure does. The summary's own metrics keep their names: the curve's are apart.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from specbatch.common.masking import mask_uri
from specbatch.config import JobConfig
from specbatch.run.events import RunStart
from specbatch.run.folder import RunFolder
from specbatch.run.multirun import SweepJob
from specbatch.run.records.tracking_notes import write_note
from specbatch.run.shard_progress import Progress
from specbatch.run.summary import Summary
from specbatch.tracking.logger import RunLogger, mark_run_killed, mlflow_run
from specbatch.tracking.run_contents import RunIdentity, log_params, log_shard_results, run_identity
from specbatch.tracking.store import new_client

log = logging.getLogger(__name__)

T = TypeVar("T")


class TrackingObserver:
    """Logs one shard run of ``job`` to MLflow (nested under ``sweep``'s parent run inside a multirun)."""

    def __init__(self, job: JobConfig, sweep: SweepJob | None = None) -> None:
        self.tracking = job.tracking
        self.sweep = sweep
        # Holds the open MLflow run from on_start to on_end.
        self._open = contextlib.ExitStack()
        self._run: RunLogger | None = None
        self._folder: RunFolder | None = None
        self._identity: RunIdentity | None = None
        self._config: dict[str, Any] = {}
        # True once the run's id is in the run folder, so on_end knows to remove it.
        self._recorded_run = False
        # The thread every MLflow call of the run goes to, from on_locked to on_end; the client it is making, and
        # on_start's pending work.
        self._worker: ThreadPoolExecutor | None = None
        self._client: Future[Any] | None = None
        self._starting: Future[None] | None = None
        # The newest progress report, while a call to log it waits for the thread (None: no call waits).
        self._progress: Progress | None = None
        self._progress_lock = threading.Lock()

    def on_locked(self, folder: RunFolder) -> None:
        """An MLflow run left RUNNING by a killed launch of this shard is ended KILLED (it can never finish); then the
        client of this launch's run is made on the worker thread, while the engine is built."""
        active = folder.read_active_run()
        if active is not None and self.tracking.enabled and mark_run_killed(self.tracking, active["run_id"]):
            folder.mlflow_active_path.unlink(missing_ok=True)
        # (Otherwise the record stays: a later launch that reaches the store ends the run.)
        if self.tracking.enabled:
            self._client = self._worker_thread().submit(new_client, self.tracking)

    def on_start(self, start: RunStart) -> None:
        """Opens the run on the worker thread and returns at once: the chunks generate meanwhile."""
        if not self.tracking.enabled:
            self._start(start)  # nothing to wait for: no client, no store
            return
        self._starting = self._worker_thread().submit(self._start, start)

    def _worker_thread(self) -> ThreadPoolExecutor:
        if self._worker is None:
            self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mlflow")
        return self._worker

    def on_progress(self, progress: Progress) -> None:
        """Logged on the run's thread without waiting for it (module docstring)."""
        if self._worker is None:
            return
        with self._progress_lock:
            waiting, self._progress = self._progress is not None, progress
        if not waiting:
            self._worker.submit(self._log_progress)

    def on_finish(self, summary: Summary, parts: list[Path]) -> None:
        self._on_worker(self._finish, summary, parts)

    def on_end(self, error: BaseException | None) -> None:
        worker, self._worker = self._worker, None
        try:
            if worker is None:
                self._end(error)
            else:
                # A failed on_start leaves nothing to end but its record; the executor is raising already.
                with contextlib.suppress(Exception):
                    self._wait_started()
                worker.submit(self._end, error).result()
        finally:
            if worker is not None:
                worker.shutdown()

    def _on_worker(self, call: Callable[..., T], *args: Any) -> T:
        """``call(*args)`` on the run's worker thread once on_start's work is done; its result or its error."""
        if self._worker is None:
            return call(*args)
        self._wait_started()
        return self._worker.submit(call, *args).result()

    def _wait_started(self) -> None:
        starting, self._starting = self._starting, None
        if starting is not None:
            starting.result()

    def _start(self, start: RunStart) -> None:
        folder = self._folder = start.folder
        self._config = start.config
        identity = self._identity = run_identity(start.config, folder, start.source_rows, start.shard_rows)
        tags = {**identity.tags, "mlflow.source.git.commit": start.runtime["git_commit"], **start.runtime}
        tags.update(self.sweep.tags() if self.sweep else {})
        later = f"python jobs/log_run.py {folder.root}"
        run = self._run = self._open.enter_context(
            mlflow_run(
                self.tracking, identity.name, tags, identity.description, self._parent_run_id, later, self._client
            )
        )
        if run and run.run_id:
            # Left behind only if this process is killed: the next launch of the shard ends the run KILLED.
            write_note(folder.mlflow_active_path, {"run_id": run.run_id, "uri": mask_uri(run.uri)})
            self._recorded_run = True
        if run:
            log_params(run, start.config)

    def _log_progress(self) -> None:
        with self._progress_lock:
            progress, self._progress = self._progress, None
        if self._run is not None and progress is not None:
            self._run.log_stepped_metrics(progress_metrics(progress))

    def _finish(self, summary: Summary, parts: list[Path]) -> None:
        run, folder = self._run, self._folder
        if run is None or folder is None:
            return
        log_shard_results(run, folder, summary, folder.read_config_yaml(), parts, self._config)
        self._note_pending(run, folder)

    def _end(self, error: BaseException | None) -> None:
        try:
            if error is None:
                self._open.close()
            else:
                # mlflow_run ends the run FAILED, or KILLED for StopRequested; the executor re-raises the error.
                self._open.__exit__(type(error), error, error.__traceback__)
        finally:
            if self._recorded_run and self._folder is not None:  # the run has ended with this launch
                self._folder.mlflow_active_path.unlink(missing_ok=True)

    @property
    def _parent_run_id(self) -> str | None:
        return self.sweep.parent_run_id if self.sweep else None

    def _note_pending(self, run: RunLogger, folder: RunFolder) -> None:
        """When MLflow failed, leave what jobs/log_run.py needs to log the shard later; clear it when all went well."""
        pending = folder.mlflow_pending_path
        if run.failure is None:
            pending.unlink(missing_ok=True)
            return
        assert self._identity is not None
        write_note(
            pending,
            {
                "run_id": run.run_id,
                "name": self._identity.name,
                "failure": run.failure,
                "parent_run_id": self._parent_run_id,
            },
        )
        log.warning("MLflow logging of shard %s is pending; log it with: %s", folder.shard_tag, run.later)


def progress_metrics(progress: Progress) -> list[tuple[str, float, int]]:
    """The live curve's points of one progress report: (name, value, step), stepped by the shard's rows done. A
    figure not known yet (AL with nothing drafted, the ETA before a row is done) is left out, not logged as 0."""
    step = progress.rows_done
    figures: dict[str, float | None] = {
        "rows_done": progress.rows_done,
        "samples_done": progress.samples_done,
        "fraction_done": progress.rows_done / progress.rows_total if progress.rows_total else None,
        "output_tokens_per_second": progress.tokens_per_second,
        "mean_acceptance_length": progress.acceptance_length,
        "eta_seconds": progress.eta_seconds,
    }
    return [(f"progress/{name}", float(value), step) for name, value in figures.items() if value is not None]
