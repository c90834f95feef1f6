"""Tracking's notes in the run folder: ``mlflow_active/<shard>.json`` (the MLflow run of the process writing the
shard, left behind only by a killed one) and ``mlflow_pending/<shard>.json`` (what jobs/log_run.py needs to log a
shard whose MLflow logging failed). What they say is :mod:`specbatch.tracking`'s; their files are this module's.

Version (``format``): 1; a file without the key is format 1 too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specbatch.run.records.record_files import read_json_if_present, refuse_newer, unstamped, write_stamped

NOTE_FORMAT = 1


def read_note(path: Path) -> dict[str, Any] | None:
    """The note at ``path``, or None when there is none; RecordError when a newer version wrote it."""
    note = read_json_if_present(path)
    if note is None:
        return None
    refuse_newer(note, path, NOTE_FORMAT, "tracking note")
    return unstamped(note)


def write_note(path: Path, note: dict[str, Any]) -> None:
    write_stamped(path, note, NOTE_FORMAT)
