"""The generation steps of one shard: config → rows → prompts → engine → Parquet parts.

The shard executor (specbatch.run.executor: skip-if-done, run record, lock, done marker) runs them; ``run_job``
(specbatch.pipeline) puts the two together with MLflow tracking as the observer. The steps: read the
data and cut the shard into chunks, make sure the assets, tokenizer and installed packages fit (everything that can
fail on bad input runs before the engine starts, so a mistake costs seconds, not a model load), then stream the
chunks through one engine, each written as it finishes (specbatch.run.chunks).
"""

from __future__ import annotations

import contextlib
import logging
import signal
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from specbatch.assets.cache import EmbeddedAssetError
from specbatch.assets.prepare import ensure_embedded
from specbatch.common.collector import resume_after_start
from specbatch.common.interrupts import StopRequested, raise_if_stopped, stop_signals_deferred
from specbatch.config import ConfigError, JobConfig
from specbatch.config.preflight import preflight
from specbatch.data.prompts import check_chat_template, load_tokenizer
from specbatch.data.rows import RowSource, SourceRow, open_rows
from specbatch.engine import (
    Engine,
    backend_class,
    check_engine,
    engine_fingerprint,
    import_engine_library,
    preflight_skipped,
    start_engine,
    validate_job,
)
from specbatch.run.chunks import ChunkWriter
from specbatch.run.executor import ShardPlan
from specbatch.run.folder import RunFolder
from specbatch.run.integrity import rows_digest
from specbatch.run.shard_progress import Progress, ShardProgress
from specbatch.run.shard_summary import summarize_shard
from specbatch.run.sharding import Shard, chunk_ranges, shard_range
from specbatch.run.streaming import ChunkStreamer
from specbatch.run.summary import Summary

log = logging.getLogger(__name__)


class ShardGeneration:
    """The generation steps of one shard (see the module docstring), in the order the executor calls them."""

    def __init__(self, job: JobConfig, engine: Engine | None = None) -> None:
        self.job = job
        # The caller's engine, or the one start_engine() starts (its start-up figures go into the summary).
        self.engine = engine
        # The engine this shard started, and so closes; None for the caller's (which the caller closes).
        self._own_engine: Engine | None = None
        self._source: RowSource | None = None
        self._chunks: list[Sequence[int]] = []
        self._tokenizer: Any = None
        # The engine's shutdown, left running by generate() while the summary is written and logged.
        self._closing: Future[None] | None = None
        # The stream running (or last run): its step timing is what spec=auto's check reads while it runs.
        self.streamer: ChunkStreamer | None = None
        # The shard's progress while generate() runs, across its streams.
        self.progress: ShardProgress | None = None

    def check(self) -> None:
        if self.engine is not None and self.engine.fingerprint != engine_fingerprint(self.job):
            raise ValueError("the engine passed in was built for another model/spec/engine config than this job")

    def engine_jobs(self) -> list[JobConfig]:
        """The jobs this shard may start an engine for, each checked before anything loads: the job itself here
        (spec=auto's steps have one per candidate)."""
        return [self.job]

    def preflight(self, job: JobConfig) -> None:
        """What the backend needs for the method on this machine (a package, a GPU), then the method's checks of its
        checkpoints, for one of engine_jobs(). The backend first: a method this machine cannot run at all (DSpark on
        vLLM's CPU build) is refused for that, whatever its draft."""
        backend_class(job.engine.backend).check_method(job)
        preflight(job)

    def cut(self, span: range) -> list[Sequence[int]]:
        """The shard's rows cut into chunks (each one Parquet part)."""
        return chunk_ranges(span, self.job.chunk_size)

    def prepare(self, shard: Shard) -> ShardPlan:
        job = self.job
        # What the backend refuses of the config: from the config alone, so before the data is read. Read once: a
        # spec=auto shard composes a job per candidate.
        engine_jobs = self.engine_jobs()
        for each in engine_jobs:
            validate_job(each)
        source = open_rows(job.dataset, job.max_samples)
        span = shard_range(len(source), shard)
        # Over the whole run, not this shard: duplicates split across shards would meet in the merged output, and
        # the verdict must not depend on shard.count.
        source.check_ids(range(len(source)))
        # cut() may read the rows (spec=auto's places its pilot by them).
        self._source = source
        self._chunks = self.cut(span)
        if job.model.embedded is not None:
            try:
                ensure_embedded(job.model.embedded, job.model.path)
            except EmbeddedAssetError as exc:
                # A folder that is not ours, a package missing: one line saying what to do, before any model loads.
                raise ConfigError(str(exc)) from None
        self._tokenizer = load_tokenizer(job.model)
        check_chat_template(job.dataset, self._tokenizer)
        skipped = preflight_skipped(job)
        if skipped is None:
            for each in engine_jobs:
                self.preflight(each)
        else:
            log.info("engine.backend=%s: %s", job.engine.backend, skipped)
        if self.engine is None:
            # E.g. a server answers at engine.url: one clear error before the run folder is written.
            check_engine(engine_jobs[0])
        return ShardPlan(source_rows=len(source), span=span, chunks=len(self._chunks))

    def chunk_digests(self) -> list[str]:
        return [rows_digest(self._rows(number)) for number in range(len(self._chunks))]

    def load_engine(self) -> None:
        if self.engine is None:
            import_engine_library(self.job)

    def start_engine(self, todo: list[int]) -> None:
        self.warn_remote_code()
        if todo and self.engine is None:
            self.engine = self._own_engine = start_engine(self.job)
        # Paused by jobs/generate.py while the job starts; generating leaves garbage to collect.
        resume_after_start()

    def warn_remote_code(self) -> None:
        if self.job.model.trust_remote_code:
            log.warning(
                "model.trust_remote_code=true: code from %s's repository runs in this process; only use it for "
                "checkpoints you trust (tagged trust_remote_code=true in MLflow)",
                self.job.model.path,
            )

    def generate(
        self,
        folder: RunFolder,
        config: dict[str, Any],
        todo: list[int],
        on_progress: Callable[[Progress], None] | None = None,
    ) -> None:
        """Chunks ``todo``, each written as it finishes, with the shard's progress shown meanwhile and handed to
        ``on_progress`` (the run's observers) every progress.interval_seconds and at the end."""
        if not todo:
            return
        with self._progress_shown(folder, todo, on_progress):
            self._generate(folder, config, todo)

    @contextlib.contextmanager
    def _progress_shown(
        self, folder: RunFolder, todo: list[int], on_progress: Callable[[Progress], None] | None
    ) -> Iterator[None]:
        """The shard's progress while the body generates chunks ``todo``: the rows of its other chunks were written
        by earlier launches, so it starts from them."""
        todo_set = set(todo)
        total = sum(len(chunk) for chunk in self._chunks)
        before = sum(len(chunk) for number, chunk in enumerate(self._chunks) if number not in todo_set)
        name = f"{self.job.spec.label} shard {folder.shard_index}/{folder.shard_count}"
        self.progress = ShardProgress(self.job.progress, name, total, before, self.job.sampling.n, on_progress)
        try:
            yield
        finally:
            progress, self.progress = self.progress, None
            progress.close()

    def _generate(self, folder: RunFolder, config: dict[str, Any], todo: list[int]) -> None:
        """The chunks not done yet, on the one engine of the shard's set-up (spec=auto's phases have their own)."""
        assert self.engine is not None, "start_engine() comes first"
        try:
            self._stream(self.engine, folder, config, todo)
        except BaseException:
            self._close_own_engine()
            raise
        own, self._own_engine = self._own_engine, None
        if own is not None:
            # Stopping vLLM's processes is seconds of waiting on them: the executor writes and logs the summary
            # meanwhile (it needs only the parts and the start-up figures), and release() waits for it.
            closer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engine-close")
            self._closing = closer.submit(own.close)
            closer.shutdown(wait=False)

    def release(self) -> None:
        # An engine started for a run that failed before generating (tracking's start, a stop signal) ends here.
        self._close_own_engine()
        closing, self._closing = self._closing, None
        if closing is not None:
            closing.result()

    def _close_own_engine(self) -> None:
        own, self._own_engine = self._own_engine, None
        if own is not None:
            own.close()

    def summarize(self, folder: RunFolder, parts: list[Path]) -> Summary:
        engine = self.engine
        startup, warmup = (engine.startup_seconds, engine.warmup_seconds) if engine else (0.0, 0.0)
        return summarize_shard(folder, self.job, parts, startup, warmup)

    def _rows(self, number: int) -> list[SourceRow]:
        assert self._source is not None, "prepare() reads the data first"
        return self._source.rows(self._chunks[number])

    def _stream(
        self,
        engine: Engine,
        folder: RunFolder,
        config: dict[str, Any],
        todo: list[int],
        job: JobConfig | None = None,
        until: Callable[[], bool | None] | None = None,
    ) -> None:
        """Generate the chunks not done yet, each written as it finishes; then this launch's record of the loop.
        ``job`` is the set-up the engine runs, when it is not the shard's own (spec=auto's phases); once ``until()``
        is true no further chunk is admitted (spec=auto hands the rest to its winner) and the call returns when
        the admitted ones are written (ChunkStreamer.run: while it is None, nothing is queued ahead).

        SIGTERM or SIGINT stops admitting chunks; the ones in flight are finished and written (for at most
        stop_grace_seconds, then abandoned), then StopRequested ends the job without the done marker. A signal that
        came once every chunk was admitted has nothing left to stop here: the stream ends as usual, and the next
        thing to begin (an engine, a stream, a phase, a job of the sweep) raises it instead.
        """
        job = job or self.job
        raise_if_stopped(f"streaming {len(todo)} chunk(s) of shard {folder.shard_tag} with {job.spec.label}")
        setup = job.spec.label if job is not self.job else None
        writer = ChunkWriter(folder, config, engine.concurrency, len(todo), setup)
        # Rows are read when their chunk is admitted, not before: memory stays flat however long the shard.
        chunks = ((number, self._rows(number)) for number in todo)
        with stop_signals_deferred(self.job.stop_grace_seconds) as stop_requested:
            log.info(
                "streaming %d chunks through the %s engine (up to %s requests at once; launch %s)",
                len(todo),
                job.engine.backend,
                engine.concurrency,
                writer.launch,
            )
            # Seeds are the shard's own set-up's, also in spec=auto's phases (ChunkStreamer).
            self.streamer = ChunkStreamer(engine, job, self._tokenizer, self.job.spec.label, self.progress)
            try:
                streamed = self.streamer.run(chunks, writer.write, stop_requested, until or (lambda: False))
            finally:
                # The timing of what ran, also for a stream a stop or an error ended (a kill loses it, never a row).
                self.streamer.steps.write(folder.steps_dir)
            # A stop that came in the stream's last step is said now; what follows it begins nothing new.
            stop_requested()
        writer.write_launch_record(streamed, engine.acceptance_settings)
        if streamed.stopped:
            raise StopRequested(
                f"stopped by {stop_requested.name} after {len(writer.written)} of {len(todo)} chunks of shard "
                f"{folder.shard_tag}; finished chunks are kept: rerun the same command to generate the rest",
                stop_requested.signum or signal.SIGTERM,
            )
