"""Writing a shard's chunks as they finish: each one's Parquet part and figures, and each launch's record of its loop.

A part's rename is its commit: its figures (counters, launch, elapsed time and the part's own size and checksum) are
written just before it, so a part never exists without them and every later reader can tell a damaged part from a
good one. A launch's record (its wall time and engine counter differences) is written when its loop ends; a killed
launch leaves none, and the shard summary then falls back on its parts' own figures.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

from specbatch.common.atomic_files import atomic_write
from specbatch.common.machine import this_machine
from specbatch.run.folder import RunFolder
from specbatch.run.integrity import PartRecord
from specbatch.run.records.launch_record import write_launch_record
from specbatch.run.records.output_parts import write_parquet_file
from specbatch.run.streaming import ChunkResult, StreamResult

log = logging.getLogger(__name__)


class ChunkWriter:
    """Writes the chunks of one launch of a shard (one streaming loop) into its run folder."""

    def __init__(
        self, folder: RunFolder, config: dict[str, Any], concurrency: int | None, todo: int, setup: str | None = None
    ) -> None:
        self.folder, self.config, self.concurrency = folder, config, concurrency
        # The set-up that generates them when it is not the run's own (spec=auto's phases), e.g. "ngram-k3".
        self.setup = setup
        # Names this launch in its parts' figures and in its own record.
        self.launch = uuid.uuid4().hex[:12]
        # Chunks this launch is to write, and those it wrote.
        self.todo = todo
        self.written: list[int] = []

    def write(self, chunk: ChunkResult) -> None:
        def write_part(tmp: Path) -> None:
            write_parquet_file(chunk.output_rows, tmp, self.config)
            stats = {
                "counters": asdict(chunk.counters),
                # Which launch wrote it (and at what engine concurrency), and when in that launch's loop: the time
                # a killed launch's parts took.
                "launch": self.launch,
                "concurrency": self.concurrency,
                "elapsed": chunk.elapsed,
                "part": PartRecord.of(tmp).to_dict(),
            }
            if self.setup is not None:
                stats["setup"] = self.setup
            self.folder.write_part_stats(chunk.number, stats)

        atomic_write(self.folder.part_path(chunk.number), write_part)
        self.written.append(chunk.number)
        log.info(
            "chunk %d written: %d rows (%d of %d chunks)",
            chunk.number,
            len(chunk.output_rows),
            len(self.written),
            self.todo,
        )

    def write_launch_record(self, streamed: StreamResult, acceptance_settings: dict[str, Any] | None = None) -> None:
        """The loop's wall time and engine counter differences, for the parts it wrote (absent if it was killed),
        and the settings its engine resolved that change acceptance (specbatch.engine.acceptance_settings)."""
        record = {
            "parts": streamed.chunks,
            "seconds": streamed.seconds,
            "counters": asdict(streamed.counters) if streamed.counters is not None else None,
            "counters_scope": streamed.counters_scope,
            "machine": this_machine().line(),
            "acceptance_settings": acceptance_settings,
        }
        write_launch_record(self.folder.launch_record_path(self.launch), record)
