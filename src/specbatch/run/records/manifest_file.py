"""The merged run's manifest, ``merged/manifest.json``: its shard count, rows and every part (relative to the run
folder), written by a merge once every shard is done.

Version (``format``): 1; a file without the key is format 1 too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specbatch.run.records.record_files import read_checked, unstamped, write_stamped

MANIFEST_FORMAT = 1
_KEYS = ("shard_count", "rows", "parts")
_FIX = "merge the run again (python jobs/merge.py <run folder>), which writes it anew"


def write_manifest(path: Path, root: Path, shard_count: int, rows: int, parts: list[Path]) -> None:
    record = {"shard_count": shard_count, "rows": rows, "parts": [str(p.relative_to(root)) for p in parts]}
    write_stamped(path, record, MANIFEST_FORMAT)


def read_manifest(path: Path) -> dict[str, Any] | None:
    """The manifest; None before a merge; RecordError when it is damaged or newer."""
    record = read_checked(path, _KEYS, MANIFEST_FORMAT, "manifest", _FIX)
    return None if record is None else unstamped(record)
