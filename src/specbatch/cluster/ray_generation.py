"""The generation steps of a shard on Ray (``launcher=ray``): the driver's side.

Everything around the generation is a local launch's (specbatch.run.executor): the resume plan, the run record, the
shard's lock (two drivers on one run: the second refuses), the checks before anything loads, the shard summary, the
done marker, the MLflow run. Only ``generate`` differs: the chunks to do become a Ray Data data set (one item per
chunk, its rows pickled by the driver, which read them), ``map_batches`` hands them to ``ray.replicas`` actors of
specbatch.cluster.ray_replica (each holding one of the job's own engines), and the driver writes each chunk's Parquet
part as its result comes back, with the same chunk writer as a local launch. Ray schedules the replicas, starts a
dead one again (``ray.max_restarts``) and asks its chunk again; the driver writes a chunk once, whichever attempt
answered, so the run holds every (row, turn, sample) exactly once. A driver killed mid-run loses the chunks in
flight (its actors end with it); the next launch finds the written parts by their markers and does the rest.

A stop (SIGTERM, Ctrl-C) abandons the chunks in flight at once: Ray Data cannot stop handing out chunks without
ending the ones running. The driver then shuts Ray Data's execution down and waits for its reading thread before
``ray.shutdown()``, so that nothing of Ray Data runs on without Ray (its threads would print "Ray is not
initialized" tracebacks, and start a second local Ray). Connecting, starting a local Ray and ending it are
specbatch.cluster.ray_connect's; what a launch refuses (before the run folder, and once Ray is up) is
specbatch.cluster.ray_checks'.
"""

from __future__ import annotations

import logging
import pickle
import queue
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from specbatch.cluster.ray_checks import check_cluster_answers, replicas_that_fit, wait_for_room
from specbatch.cluster.ray_connect import RayConnection, connect, forget_executions, stop_execution
from specbatch.cluster.ray_progress import LaunchProgress, ProgressBoard
from specbatch.cluster.ray_replica import EngineReplica, ReplicaChunk, ReplicaInfo
from specbatch.common.collector import resume_after_start
from specbatch.common.interrupts import StopRequested, raise_if_stopped, stop_signals_deferred
from specbatch.config import JobConfig, RayConfig
from specbatch.engine import EngineUnavailable
from specbatch.engine.spec_metrics import Counters, acceptance_length
from specbatch.run.chunks import ChunkWriter
from specbatch.run.folder import RunFolder
from specbatch.run.generate import ShardGeneration
from specbatch.run.records.replica_figures import replica_figures_path, write_replica_figures
from specbatch.run.records.steps_file import write_steps
from specbatch.run.shard_summary import summarize_shard
from specbatch.run.streaming import StreamResult
from specbatch.run.summary import Summary

log = logging.getLogger(__name__)

# Seconds the driver waits for a result before it looks at its progress and stop signals again.
POLL_SECONDS = 1.0
# What the first stop signal does on Ray (the job's warning; specbatch.common.interrupts).
ABANDON_ON_STOP = (
    "stopping now: the chunks in flight on the Ray replicas are abandoned (Ray Data cannot finish them without "
    "starting others), the written ones are kept"
)


class RayShardGeneration(ShardGeneration):
    """A shard's generation with its rows on Ray Data and its engines in Ray actors (module docstring)."""

    def __init__(self, job: JobConfig) -> None:
        super().__init__(job)
        assert job.ray is not None, "launcher=ray sets the ray section"
        self.ray_cfg: RayConfig = job.ray
        # Whether this job started (or connected) Ray, and so shuts it down; a local Ray's watchdog (its agents
        # outlive a kill -9 of the driver otherwise) and session folder.
        self._ray = RayConnection()
        # The replicas the launch runs: ray.replicas, or as many as a local Ray holds.
        self._replicas = self.ray_cfg.replicas
        # The chunks each replica answered (written), by the replica's id: a restarted one is a new id.
        self._answered: dict[str, list[ReplicaChunk]] = {}
        # The written chunks' figures and the replicas' reports of the ones in flight (made with the data set).
        self._launch_progress: LaunchProgress | None = None
        self._board_failed = False

    @property
    def replicas(self) -> list[ReplicaInfo]:
        """The replicas that answered this launch's chunks (each chunk's result names its replica)."""
        return [chunks[0].replica for chunks in self._answered.values()]

    def check(self) -> None:
        super().check()
        # Before the run folder is written: a cluster that does not answer is one line now, not a hang.
        check_cluster_answers(self.ray_cfg)

    def load_engine(self) -> None:
        # The driver holds no engine; Ray's client library is its import of seconds.
        import ray  # noqa: F401
        import ray.data  # noqa: F401

    def start_engine(self, todo: list[int]) -> None:
        if todo:
            raise_if_stopped(f"connecting to Ray for {len(todo)} chunk(s)")
            self._ray = connect(self.ray_cfg)
            self._check_room()
        resume_after_start()

    def _check_room(self) -> None:
        """A replica that can never be placed is refused, rather than waited for: on the job's local Ray against its
        resources (and replicas beyond what it holds are not started: no autoscaler will add room), on a cluster by
        waiting a bounded time for room for one."""
        import ray

        cfg, job = self.ray_cfg, self.job
        gpus = cfg.gpus(job.engine.name, job.model.tensor_parallel_size)
        if not self._ray.local:
            wait_for_room(cfg, gpus)
            return
        resources = ray.cluster_resources()
        self._replicas = replicas_that_fit(cfg, gpus, resources)
        if self._replicas < cfg.replicas:
            log.warning(
                "ray.replicas=%d but the local Ray (this machine: %g CPUs, %g GPUs) holds %d replica(s) of "
                "ray.cpus_per_replica=%g: running %d; a cluster (ray.address) runs more",
                cfg.replicas,
                resources.get("CPU", 0),
                resources.get("GPU", 0),
                self._replicas,
                cfg.cpus_per_replica,
                self._replicas,
            )

    def _generate(self, folder: RunFolder, config: dict[str, Any], todo: list[int]) -> None:
        writer = ChunkWriter(folder, config, self.job.engine.max_num_seqs, len(todo))
        log.info(
            "streaming %d chunks through Ray Data to %d engine replica(s) (launch %s)",
            len(todo),
            self._replicas,
            writer.launch,
        )
        began = time.time()
        with stop_signals_deferred(self.job.stop_grace_seconds, first_stop=ABANDON_ON_STOP) as stop_requested:
            for result in self._results(todo, stop_requested):
                if result.number in writer.written:
                    # A chunk asked twice (its replica died after answering) is written once.
                    log.info("chunk %d came back again (a retried replica): already written", result.number)
                    continue
                self._write(folder, writer, result, began)
        streamed = self._stream_result(writer)
        writer.write_launch_record(streamed)
        self._record_replicas(folder, writer.launch)
        if stop_requested():
            raise StopRequested(
                f"stopped by {stop_requested.name} after {len(writer.written)} of {len(todo)} chunks of shard "
                f"{folder.shard_tag}; the chunks in flight on the replicas were abandoned, finished chunks are kept: "
                "rerun the same command to generate the rest",
                stop_requested.signum or signal.SIGTERM,
            )

    def _results(self, todo: list[int], stop_requested: Any) -> Iterator[ReplicaChunk]:
        """The chunks' results as Ray Data returns them, read on a thread so that this one keeps the progress and
        the stop signals; a stop ends the iteration (what is in flight is abandoned with the actors)."""
        results: queue.Queue[Any] = queue.Queue()
        done = object()
        dataset = self._dataset(todo)
        stopping = threading.Event()

        def consume() -> None:
            try:
                for batch in dataset.iter_batches(batch_size=None, batch_format="numpy"):
                    for blob in batch["result"]:
                        results.put(pickle.loads(blob))
            except BaseException as exc:  # noqa: BLE001 - handed to the main thread, which raises it
                if not stopping.is_set():
                    results.put(exc)
            results.put(done)

        reader = threading.Thread(target=consume, name="ray-results", daemon=True)
        reader.start()
        try:
            while not stop_requested():
                try:
                    item = results.get(timeout=POLL_SECONDS)
                except queue.Empty:
                    self._show_progress(read_board=True)
                    continue
                if item is done:
                    return
                if isinstance(item, BaseException):
                    raise _replicas_failed(item) from item
                yield item
        finally:
            if reader.is_alive():
                stopping.set()
                stop_execution(reader)
            else:
                forget_executions()

    def _dataset(self, todo: list[int]) -> Any:
        """The chunks to do as a Ray Data data set (one block per chunk), mapped by the engine replicas."""
        import ray.data

        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False  # the shard's own progress says it (specbatch.run.shard_progress)
        items = [{"chunk": number, "rows": pickle.dumps(self._rows(number))} for number in todo]
        cfg, job = self.ray_cfg, self.job
        board = ProgressBoard.remote()  # type: ignore[attr-defined]
        self._launch_progress = LaunchProgress(board)
        return ray.data.from_items(items, override_num_blocks=len(items)).map_batches(
            EngineReplica,
            fn_constructor_kwargs={"job": job, "board": board},
            batch_size=1,
            compute=ray.data.ActorPoolStrategy(size=self._replicas),
            num_cpus=cfg.cpus_per_replica,
            num_gpus=cfg.gpus(job.engine.name, job.model.tensor_parallel_size),
            max_restarts=cfg.max_restarts,
            max_task_retries=-1,
        )

    def _write(self, folder: RunFolder, writer: ChunkWriter, result: ReplicaChunk, began: float) -> None:
        # The batch its engine ran (the replicas share one config, so one figure), as a local launch's parts say.
        writer.concurrency = result.replica.concurrency
        writer.write(result.chunk_result(result.finished_at - began))
        if result.steps is not None:
            write_steps(folder.steps_dir, result.steps)
        self._answered.setdefault(result.replica.replica, []).append(result)
        assert self._launch_progress is not None, "made with the data set"
        self._launch_progress.chunk_written(
            result.number, result.rows, result.rows * self.job.sampling.n, result.counters
        )
        self._show_progress(read_board=False)

    def _show_progress(self, read_board: bool) -> None:
        """The shard's progress from the written chunks and the replicas' latest reports of the ones in flight."""
        if self.progress is None or self._launch_progress is None:
            return
        if read_board:
            try:
                self._launch_progress.read_board()
            except Exception as exc:  # noqa: BLE001 - progress never stops the job; the written chunks still count
                if not self._board_failed:
                    log.warning("the replicas' progress reports could not be read (%s): showing written chunks", exc)
                self._board_failed = True
        figures = self._launch_progress.total()
        self.progress.restate(figures.rows, figures.samples, figures.counters)
        self.progress.tick(open_chunks=len(self._launch_progress.in_flight))

    def _stream_result(self, writer: ChunkWriter) -> StreamResult:
        """This launch's loop as a local launch records it: its chunks, and its seconds from the first replica's
        engine ready to the last chunk back (the engines' start-up is counted apart, as a local launch's is).
        Per-request figures only: the replicas' engine counters are not the driver's to difference."""
        chunks = [c for each in self._answered.values() for c in each]
        seconds = 0.0
        if chunks:
            seconds = max(c.finished_at for c in chunks) - min(r.ready_at for r in self.replicas)
        return StreamResult(chunks=list(writer.written), seconds=max(seconds, 0.0), counters_scope="requests")

    def _record_replicas(self, folder: RunFolder, launch: str) -> None:
        """Each replica's own figures (its node, engine start-up, chunks, rows, tokens, AL, tok/s), beside the
        launch's record; the shard's figures are its parts', as for any launch."""
        figures = []
        for info in self.replicas:
            mine = self._answered[info.replica]
            counters = sum((c.counters for c in mine), Counters())
            seconds = max((c.finished_at for c in mine), default=info.ready_at) - info.ready_at
            al = acceptance_length(counters.accepted_tokens, counters.drafts) if counters.drafts else None
            figures.append(
                {
                    **asdict(info),
                    "chunks": len(mine),
                    "rows": sum(c.rows for c in mine),
                    "output_tokens": counters.generation_tokens,
                    "acceptance_length": al,
                    "seconds": seconds,
                    "output_tok_s": counters.generation_tokens / seconds if seconds > 0 else 0.0,
                }
            )
            log.info("replica %s", ", ".join(f"{key} {value}" for key, value in figures[-1].items()))
        write_replica_figures(replica_figures_path(folder.stats_dir, launch), figures)

    def summarize(self, folder: RunFolder, parts: list[Path]) -> Summary:
        # The engines' start-up: the slowest replica's (the launch waited for the first, the others overlapped).
        startup = max((r.startup_seconds for r in self.replicas), default=0.0)
        warmup = max((r.warmup_seconds for r in self.replicas), default=0.0)
        return summarize_shard(folder, self.job, parts, startup, warmup)

    def release(self) -> None:
        # Ends the actors of this job (and a local Ray the job started, with every process and its session folder).
        self._ray.close()


def _replicas_failed(error: BaseException) -> BaseException:
    """What the job says when Ray gives up on the replicas (a replica's start failed, or it died more than
    ray.max_restarts times): one line with Ray's own first line of why; finished chunks are kept. Ray's other
    errors (a lost connection to the cluster) say themselves."""
    import ray.exceptions

    if not isinstance(error, ray.exceptions.RayError):
        return error
    why = next((line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__)
    return EngineUnavailable(
        f"the engine replicas on Ray failed ({type(error).__name__}: {why[:400]}); the chunks written so far are "
        "kept: fix the cause (the replicas' log lines above say it) and rerun the same command for the rest"
    )
