"""A shard's source record, ``stats/<shard>/source.json``: a digest of each chunk's source rows, written when the
shard starts, so that a resume over changed data is refused instead of mixing two versions of it.

Version (``format``): 1; a file without the key is format 1 too. A shard whose parts were written before shards
recorded their source has none: its next launch records the source as it is then.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specbatch.run.records.record_files import read_checked, unstamped, write_stamped

SOURCE_FORMAT = 1
_KEYS = ("chunks",)
_FIX = (
    "remove it: the shard's next launch records its source rows again as they are then (whether they changed before "
    "that can then no longer be told)"
)


def read_source_record(path: Path) -> dict[str, Any] | None:
    """The digests at ``path``; None when there are none; RecordError when the file is damaged."""
    record = read_checked(path, _KEYS, SOURCE_FORMAT, "source", _FIX)
    return None if record is None else unstamped(record)


def write_source_record(path: Path, digests: list[str]) -> None:
    write_stamped(path, {"chunks": digests}, SOURCE_FORMAT)


def unrecorded_with_parts(record: dict[str, Any] | None, has_parts: bool) -> bool:
    """Whether a shard has parts but no source record: parts written before shards recorded their source."""
    return record is None and has_parts


def changed_chunks(recorded: dict[str, Any], digests: list[str]) -> list[int]:
    """Chunks whose source rows differ from the record (a chunk the record lacks, or lacks now, counts as changed)."""
    old = recorded["chunks"]
    return [
        n for n in range(max(len(old), len(digests))) if n >= len(old) or n >= len(digests) or old[n] != digests[n]
    ]
