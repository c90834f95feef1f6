"""A launch's record, ``stats/<shard>/launch-<id>.json``: one launch's streaming loop (the parts it wrote, its wall
time, engine counter differences, whose work they count, its machine, the settings that change acceptance). Written
when the loop ends; a killed launch leaves none, and the shard summary then counts its parts by their own figures.

Version (``format``): 1; a file without the key is format 1 too. Keys added within format 1 read, in records written
without them, as what they meant then: ``counters_scope`` "engine" (this job's engine alone), ``acceptance_settings``
none (not recorded).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specbatch.run.records.record_files import read_checked, unstamped, write_stamped

LAUNCH_FORMAT = 1
# The keys the shard summary indexes, and what to do when one is damaged.
_KEYS = ("parts", "seconds", "counters")
_FIX = "remove it: the shard summary then counts the launch's parts by their own figures, as a killed launch's"
# Keys added since the first records, with their value in records written without them.
_ADDED = {"counters_scope": "engine", "acceptance_settings": None}


def upgrade_launch_record(record: dict[str, Any]) -> dict[str, Any]:
    """A launch's record with every key today's version writes."""
    return {**_ADDED, **record}


def read_launch_record(path: Path) -> dict[str, Any] | None:
    """The record at ``path`` in today's shape; None when there is none; RecordError when it is damaged."""
    record = read_checked(path, _KEYS, LAUNCH_FORMAT, "launch", _FIX)
    return upgrade_launch_record(unstamped(record)) if record is not None else None


def write_launch_record(path: Path, record: dict[str, Any]) -> None:
    write_stamped(path, record, LAUNCH_FORMAT)
