"""A part's stats, ``stats/<shard>/part-<n>.json``: one chunk's counters, the launch that wrote it (and at what
engine concurrency), when in that launch's loop it finished, and the part's own size and checksum. Written just
before its part (the part's rename is the commit), so a part never exists without them.

Version (``format``): 1; a file without the key is format 1 too. Keys were added within format 1, and a read gives
them the value they had in the stats written without them: ``launch`` and ``elapsed`` none (one generate call per
chunk, before the engine was streamed: the chunk's own ``seconds`` then timed it), ``part`` none (no checksum: only
the part's Parquet footer can be checked), ``concurrency`` none (unknown).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specbatch.run.records.record_files import refuse_newer, unstamped, write_stamped

PART_STATS_FORMAT = 1
# Keys added since the first stats, with their value in stats written without them.
_ADDED = {"launch": None, "elapsed": None, "part": None, "concurrency": None}


def upgrade_part_stats(stats: dict[str, Any]) -> dict[str, Any]:
    """A part's stats with every key today's version writes."""
    return {**_ADDED, **stats}


def read_part_stats(path: Path) -> dict[str, Any]:
    """The stats at ``path`` in today's shape; FileNotFoundError when there are none (parts written by hand, or
    before parts had stats), ValueError when they are not JSON."""
    stats = json.loads(path.read_text())
    if not isinstance(stats, dict):
        raise ValueError(f"{path} holds no JSON object")
    refuse_newer(stats, path, PART_STATS_FORMAT, "part stats")
    return upgrade_part_stats(unstamped(stats))


def recorded_part(path: Path) -> dict[str, Any] | None:
    """The part's size, rows and checksum as its stats at ``path`` recorded them; None when they recorded none (stats
    written before parts had checksums) or there are no stats (parts written by hand, or before parts had stats).
    OSError or ValueError when the stats cannot be read."""
    try:
        return read_part_stats(path)["part"]
    except FileNotFoundError:
        return None


def write_part_stats(path: Path, stats: dict[str, Any]) -> None:
    write_stamped(path, stats, PART_STATS_FORMAT)


def seconds_of_unlaunched(stats: list[dict[str, Any]]) -> float:
    """The generation time of parts whose stats name no launch (each chunk was its own generate call then)."""
    return sum(s["seconds"] for s in stats)
