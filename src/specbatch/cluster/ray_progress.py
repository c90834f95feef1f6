"""How far a Ray launch is while its chunks run: the replicas report, the driver's shard progress shows.

A chunk's result comes back only when all of it is done, and a chunk is up to ``chunk_size`` rows: the shard's
progress (specbatch.run.shard_progress: the bar, the plain lines, MLflow's ``progress/*``) would stand still for
minutes. So each replica tells a small Ray actor, the board, its current chunk's figures so far (rows and samples
done, output tokens, drafts, accepted) at most once a second, fire and forget; the driver reads the board while it
waits for results and shows the written chunks' figures plus the latest report of every chunk still in flight. A
chunk asked again (its replica died) reports again under its number, so the dead attempt's figures are replaced,
not added; a written chunk's reports are dropped for its result's own.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import ray

from specbatch.engine.spec_metrics import Counters

# Seconds between two reports of one replica: the driver shows them at most once a second too.
REPORT_SECONDS = 1.0


@dataclass
class ChunkFigures:
    """One chunk's figures so far (or in full, once written)."""

    rows: int = 0
    samples: int = 0
    counters: Counters = field(default_factory=Counters)


@ray.remote(num_cpus=0)
class ProgressBoard:
    """The latest report of each chunk in flight, taken (and cleared) by the driver."""

    def __init__(self) -> None:
        self.reports: dict[int, ChunkFigures] = {}

    def report(self, chunk: int, figures: ChunkFigures) -> None:
        self.reports[chunk] = figures

    def take(self) -> dict[int, ChunkFigures]:
        reports, self.reports = self.reports, {}
        return reports


class ReplicaProgress:
    """What the streaming loop tells a shard's progress (answered, finished, tick), counted for the replica's current
    chunk and sent to the board at most every REPORT_SECONDS."""

    def __init__(self, board: Any) -> None:
        self.board = board
        self.chunk = -1
        self.figures = ChunkFigures()
        self._sent = 0.0

    def start(self, chunk: int) -> None:
        self.chunk, self.figures = chunk, ChunkFigures()

    def answered(self, counters: Counters) -> None:
        self.figures.counters = self.figures.counters + counters

    def finished(self, samples: int, row: bool) -> None:
        self.figures.samples += samples
        self.figures.rows += row

    def tick(self, in_engine: int = 0, open_chunks: int = 0) -> None:
        now = time.monotonic()
        if now - self._sent >= REPORT_SECONDS:
            self._sent = now
            self.board.report.remote(self.chunk, self.figures)


class LaunchProgress:
    """The driver's sums: the written chunks' figures, and the latest report of each chunk in flight."""

    def __init__(self, board: Any) -> None:
        self.board = board
        self.written = ChunkFigures()
        self.in_flight: dict[int, ChunkFigures] = {}
        self._done: set[int] = set()

    def chunk_written(self, chunk: int, rows: int, samples: int, counters: Counters) -> None:
        self._done.add(chunk)
        self.in_flight.pop(chunk, None)
        self.written.rows += rows
        self.written.samples += samples
        self.written.counters = self.written.counters + counters

    def read_board(self) -> None:
        """The replicas' reports since the last read (a late report of a written chunk is dropped)."""
        for chunk, figures in ray.get(self.board.take.remote(), timeout=30).items():
            if chunk not in self._done:
                self.in_flight[chunk] = figures

    def total(self) -> ChunkFigures:
        out = ChunkFigures(self.written.rows, self.written.samples, self.written.counters)
        for figures in self.in_flight.values():
            out.rows += figures.rows
            out.samples += figures.samples
            out.counters = out.counters + figures.counters
        return out
