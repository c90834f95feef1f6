"""What a shard records about its inputs and its parts, and the checks that read those records back.

- Each Parquet part's size, row count and SHA-256 go into its chunk's stats file before the part is renamed into
  place. Status, merge, compare and resume check them, so a truncated or corrupted part is named (and a rerun
  regenerates it) instead of being counted as done or ending in an Arrow traceback.
- A digest of every chunk's source rows (ids, categories and prompts as parsed) is recorded when a shard starts.
  A resume over an edited data file would otherwise mix rows of two versions of it (some twice, some never), so it
  is refused instead.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from specbatch.data.rows import SourceRow
from specbatch.run.folder import RunFolder
from specbatch.run.records.part_stats import recorded_part

log = logging.getLogger(__name__)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class PartRecord:
    """A Parquet part as it was written."""

    rows: int
    bytes: int
    sha256: str

    @classmethod
    def of(cls, path: Path) -> PartRecord:
        return cls(rows=pq.read_metadata(path).num_rows, bytes=path.stat().st_size, sha256=file_sha256(path))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def part_problem(folder: RunFolder, number: int) -> str | None:
    """Why part ``number`` of the shard cannot be trusted, or None when it is as it was written."""
    part, stats_path = folder.part_path(number), folder.part_stats_path(number)
    if not part.is_file():
        return "it is missing"
    try:
        recorded = recorded_part(stats_path)
    except (OSError, ValueError) as exc:
        return f"its stats file {stats_path.name} cannot be read ({type(exc).__name__})"
    if recorded is None:
        # No checksum recorded (specbatch.run.records.part_stats): the Parquet footer must at least parse (catches
        # truncation).
        try:
            pq.read_metadata(part)
        except Exception as exc:  # noqa: BLE001 - Arrow reports damage with several exception types
            return f"it is not a readable Parquet file ({type(exc).__name__})"
        return None
    size = part.stat().st_size
    if size != recorded["bytes"]:
        return f"it has {size} bytes where {recorded['bytes']} were written (truncated or overwritten)"
    if file_sha256(part) != recorded["sha256"]:
        return "its content differs from what was written (SHA-256 mismatch)"
    return None


def expected_parts(folder: RunFolder) -> list[int]:
    """Part numbers the shard has or should have: those on disk plus every chunk its source record lists."""
    numbers = set(folder.part_numbers())
    record = folder.read_source_record()
    if record is not None:
        numbers.update(range(len(record["chunks"])))
    return sorted(numbers)


def damaged_parts(folder: RunFolder, numbers: Iterable[int] | None = None) -> dict[int, str]:
    """Part number -> what is wrong with it, for the shard's parts (all expected ones by default)."""
    problems = {}
    for number in expected_parts(folder) if numbers is None else numbers:
        problem = part_problem(folder, number)
        if problem is not None:
            problems[number] = problem
    return problems


def describe_damage(folder: RunFolder, problems: dict[int, str]) -> str:
    return "; ".join(f"{folder.part_path(n)}: {why}" for n, why in sorted(problems.items()))


def rows_digest(rows: list[SourceRow]) -> str:
    """A digest of source rows as the job parsed them: ids, categories, prompts, and why a row is unusable."""
    digest = hashlib.sha256()
    for row in rows:
        digest.update(json.dumps(dataclasses.asdict(row), sort_keys=True, ensure_ascii=False).encode())
        digest.update(b"\n")
    return digest.hexdigest()[:32]
