"""An engine replica on Ray: an actor Ray Data hands chunks of rows to, holding one of the job's own engines.

Ray Data's ``map_batches`` builds it once per actor (its engine starts at the first call, see ``_start``) and calls
it with one chunk at a time: a batch of one item, the chunk's number and its rows (pickled by the driver, which
read the data: a replica on another node needs no access to the data set's files). The chunk streams through the
engine with the same loop a local launch runs (specbatch.run.streaming), so its rows, their per-request acceptance
figures and every sample are exactly what a local launch writes; what comes back is the chunk's result, pickled, for
the driver to write as the chunk's Parquet part. The replica writes nothing: the run folder is the driver's, so a
retried chunk (its replica died) is written once, by the driver, whichever attempt returns.
"""

from __future__ import annotations

import logging
import os
import pickle
import socket
import time
import uuid
from dataclasses import dataclass
from typing import Any

import ray

from specbatch.cluster.ray_progress import ReplicaProgress
from specbatch.config import ConfigError, JobConfig
from specbatch.data.prompts import load_tokenizer
from specbatch.engine import import_engine_library, start_engine
from specbatch.engine.spec_metrics import Counters
from specbatch.run.step_log import StepLog
from specbatch.run.streaming import ChunkResult, ChunkStreamer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReplicaInfo:
    """Which replica answered a chunk, and what its engine's start took."""

    # New for every start of the actor: a restarted replica (its process died) is a new one.
    replica: str
    # The machine's name, and Ray's id of its node (two raylets on one machine are two nodes).
    node: str
    node_id: str
    pid: int
    startup_seconds: float
    warmup_seconds: float
    # The most requests its engine runs at once (the batch a local launch's parts record).
    concurrency: int | None
    # Wall-clock time (time.time()) its engine was ready: where the replicas' generation time starts.
    ready_at: float


@dataclass
class ReplicaChunk:
    """One chunk's result as a replica returns it: what the chunk writer writes, plus what the driver adds up."""

    number: int
    output_rows: list[dict[str, Any]]
    counters: Counters
    replica: ReplicaInfo
    # Wall-clock time the chunk's last row was finished.
    finished_at: float
    # The engine steps its stream timed (specbatch.run.step_log), as a local launch's step log holds them.
    steps: Any = None
    rows: int = 0

    def chunk_result(self, elapsed: float) -> ChunkResult:
        return ChunkResult(self.number, self.output_rows, self.counters, elapsed)


class EngineReplica:
    """The callable class Ray Data runs as actors: map_batches(EngineReplica, fn_constructor_kwargs={"job": job})."""

    def __init__(self, job: JobConfig, board: Any = None) -> None:
        logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s][%(levelname)s] - %(message)s")
        self.job, self.board = job, board
        self.engine: Any = None

    def __call__(self, batch: dict[str, Any]) -> dict[str, list[Any]]:
        if self.engine is None:
            self._start()
        numbers, results = [], []
        for number, rows in zip(batch["chunk"], batch["rows"], strict=True):
            numbers.append(int(number))
            results.append(pickle.dumps(self.generate(int(number), pickle.loads(rows))))
        return {"chunk": numbers, "result": results}

    def _start(self) -> None:
        """The engine, built on the thread that runs the calls, not in __init__: Ray Data runs a callable class's
        calls on a thread of their own, and the engine's OpenMP threads belong to the thread that first ran a
        parallel region. Built in __init__, the calls would get a second team beside the first, more threads than
        cores; libgomp then sleeps between regions instead of spinning (measured on 2 cores: the engine's two
        threads at 1.66 cores of 2 and 86 % of a local launch's tok/s; built here, as in a local launch)."""
        job = self.job
        if job.model.embedded is not None:
            # The embedded model is built on first use on each machine (a no-op where it is ready).
            from specbatch.assets.cache import EmbeddedAssetError
            from specbatch.assets.prepare import ensure_embedded

            try:
                ensure_embedded(job.model.embedded, job.model.path)
            except EmbeddedAssetError as exc:
                raise ConfigError(f"on {socket.gethostname()}: {exc}") from None
        self.tokenizer = load_tokenizer(job.model)
        import_engine_library(job)
        self.engine = start_engine(job)
        self.info = ReplicaInfo(
            replica=uuid.uuid4().hex[:8],
            node=socket.gethostname(),
            node_id=ray.get_runtime_context().get_node_id(),
            pid=os.getpid(),
            startup_seconds=self.engine.startup_seconds,
            warmup_seconds=self.engine.warmup_seconds,
            concurrency=self.engine.concurrency,
            ready_at=time.time(),
        )
        # How far its chunk is, told to the driver's board (specbatch.cluster.ray_progress) while it runs.
        self.progress = ReplicaProgress(self.board) if self.board is not None else None
        # One loop object for the replica's life: the order its requests were answered in runs on across chunks.
        self.streamer = ChunkStreamer(self.engine, job, self.tokenizer, job.spec.label, self.progress)
        log.info("replica %s ready on %s (pid %d)", self.info.replica, self.info.node, self.info.pid)

    def generate(self, number: int, rows: list[Any]) -> ReplicaChunk:
        """Chunk ``number`` through this replica's engine, with its own step log."""
        job, finished = self.job, []
        self.streamer.steps = StepLog(job.spec.label, job.spec.k_schedule, self.engine.concurrency)
        if self.progress is not None:
            self.progress.start(number)
        self.streamer.run([(number, rows)], finished.append)
        (chunk,) = finished
        steps = self.streamer.steps.table if len(self.streamer.steps) else None
        log.info("replica %s: chunk %d done (%d rows)", self.info.replica, number, len(rows))
        return ReplicaChunk(
            number, chunk.output_rows, chunk.counters, self.info, time.time(), steps=steps, rows=len(rows)
        )

    def __del__(self) -> None:
        # Ray Data ends its actors when the data set is done: the engine's own processes end with them.
        engine = getattr(self, "engine", None)
        if engine is not None:
            try:
                engine.close()
            except Exception:  # noqa: BLE001 - the actor is going away either way
                log.debug("closing the replica's engine failed", exc_info=True)
