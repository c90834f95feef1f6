"""A speculation profile, ``stats/<shard>/speculation_profile.json`` (a shard's) and
``merged/speculation_profile.json`` (the merged run's): what its figures mean is
:mod:`specbatch.run.speculation_profile`'s; its file is this module's.

Version: 1. Like the summary, the file carries no ``format`` key and this version writes none: other tools read it in
the shape NVIDIA ModelOpt's speculation_profile.json has; a file with a ``format`` above 1 is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specbatch.common.atomic_files import atomic_write_json
from specbatch.run.records.record_files import read_checked

PROFILE_FORMAT = 1
# Its file name, a shard's and the merged run's.
PROFILE_FILE = "speculation_profile.json"
# The keys every profile has, and what mends one that is damaged: it is made from the rows, which are whole.
_KEYS = ("method", "k", "rows")
REBUILD = "python jobs/merge.py on the run folder, or a rerun of the shard, rebuilds it from the rows"


def write_profile(path: Path, profile: dict[str, Any] | None) -> None:
    """Write ``profile`` at ``path``; None removes one written before, which no figures of today stand behind."""
    if profile is None:
        path.unlink(missing_ok=True)
    else:
        atomic_write_json(path, profile)


def read_profile(path: Path) -> dict[str, Any] | None:
    """The profile at ``path``, or None when there is none; RecordError when it is damaged (cut short, not an
    object, keys missing) or a newer version wrote it."""
    return read_checked(path, _KEYS, PROFILE_FORMAT, "speculation profile", REBUILD)
