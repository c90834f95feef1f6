"""A speculation profile, ``stats/<shard>/speculation_profile.json`` (a shard's) and
``merged/speculation_profile.json`` (the merged run's): what its figures mean is
:mod:`specbatch.run.speculation_profile`'s; its file is this module's.

Version: 1. Like the summary, the file carries no ``format`` key and this version writes none: other tools read it in
the shape NVIDIA ModelOpt's speculation_profile.json has; a file with a ``format`` above 1 is refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specbatch.common.atomic_files import atomic_write_json
from specbatch.run.records.record_files import refuse_newer

PROFILE_FORMAT = 1
# Its file name, a shard's and the merged run's.
PROFILE_FILE = "speculation_profile.json"


def write_profile(path: Path, profile: dict[str, Any] | None) -> None:
    """Write ``profile`` at ``path``; None removes one written before, which no figures of today stand behind."""
    if profile is None:
        path.unlink(missing_ok=True)
    else:
        atomic_write_json(path, profile)


def read_profile(path: Path) -> dict[str, Any] | None:
    """The profile at ``path``, or None when there is none; RecordError when a newer version wrote it."""
    try:
        profile = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    refuse_newer(profile, path, PROFILE_FORMAT, "speculation profile")
    return profile
