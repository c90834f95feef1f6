"""What a shard shows of itself while it generates (top-level ``progress``): how, and how often.

Nothing here changes what is generated or measured, so the section belongs to no identity (a run folder's digest
stays the same whatever it says). specbatch.run.shard_progress shows it; specbatch.tracking logs the same figures.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from specbatch.common.errors import require


class ProgressDisplay(enum.StrEnum):
    """How the progress is shown on the job's console. (Not on/off: YAML 1.1 reads those as booleans.)"""

    # A bar when the job's stderr is a terminal, plain lines otherwise (a Slurm log, a pipe, a file).
    auto = "auto"
    # Always the bar (tqdm), even into a file: each redraw is a carriage return there.
    bar = "bar"
    # Always plain log lines, one every progress.interval_seconds.
    lines = "lines"


@dataclass
class ProgressConfig:
    """The shard's progress while it generates: rows and samples done of the shard's, output tok/s, AL so far, ETA."""

    display: ProgressDisplay = ProgressDisplay.auto
    # Seconds between two plain lines, and between two points of the live curve in the shard's MLflow run (the
    # progress/* metrics). The bar redraws on its own, twice a second.
    interval_seconds: float = 30.0

    def __post_init__(self) -> None:
        require(
            self.interval_seconds > 0,
            f"progress.interval_seconds={self.interval_seconds} must be more than 0 (the seconds between two progress "
            "lines and between two MLflow points), e.g. progress.interval_seconds=30",
        )
