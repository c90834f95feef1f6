"""What a shard run tells its observers (tracking is one: specbatch.tracking.shard_run), the way Lightning's loggers
watch a fit: they see the run, they never steer it or write its data."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from specbatch.run.folder import RunFolder
from specbatch.run.shard_progress import Progress
from specbatch.run.summary import Summary


@dataclass(frozen=True)
class RunStart:
    """What is known about a shard run when its generation starts."""

    folder: RunFolder
    # The run's resolved config with secrets masked (as in run.json).
    config: dict[str, Any]
    # Versions, device and commit of this process (common.environment.runtime_info).
    runtime: dict[str, str]
    # Rows of the whole data set (every shard).
    source_rows: int
    # Rows of this shard (None where unknown).
    shard_rows: int | None = None


class RunObserver(Protocol):
    """Events of one shard run, in order: on_locked, then on_start, on_progress (any number of times while it
    generates), on_finish (when it finished) and on_end.

    A run found done (before or after taking the lock) sends none; a run refused before it starts (bad source,
    another writer) sends at most on_locked. on_end follows every on_start, with the exception that ended the run
    (StopRequested when SIGTERM stopped it) or None. An engine that failed to start still sends on_start, then on_end
    with its error, so the run is recorded with why it ended.
    """

    def on_locked(self, folder: RunFolder) -> None:
        """This process now holds the shard's lock (its engine's library imported, ShardSteps.load_engine): what a
        killed earlier launch left can be settled, and slow preparation started (in a thread) beside the engine's
        build."""

    def on_start(self, start: RunStart) -> None:
        """Generation starts: the engine is built and warm (or there was none to build). Slow work started here (in
        a thread) runs beside the generation."""

    def on_progress(self, progress: Progress) -> None:
        """The shard's figures so far, every progress.interval_seconds while it generates and once at its end
        (specbatch.run.shard_progress). Called from the generating loop: it must return at once and never raise."""

    def on_finish(self, summary: Summary, parts: list[Path]) -> None:
        """Every part is written and the shard summary too; the done marker comes next."""

    def on_end(self, error: BaseException | None) -> None:
        """The run ended: done, or stopped by ``error``."""
