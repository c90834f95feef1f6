"""Names longer than their file system takes, found before anything is made under them.

The OS refuses a path with such a name only when something is created there ("File name too long", ENAMETOOLONG),
which for a run folder is after the model has loaded. Each file system caps one name (PC_NAME_MAX: 255 bytes on
ext4, XFS, tmpfs, NFS); a path that does not exist yet is judged by its nearest folder that does, the file system it
would be made on.
"""

from __future__ import annotations

import os
from pathlib import Path

# What a file system that does not say takes (POSIX systems' usual NAME_MAX).
_USUAL_NAME_MAX = 255


def name_limit(path: Path) -> int:
    """The longest name, in bytes, on the file system that holds ``path`` or would hold it."""
    for folder in (path, *path.parents):
        try:
            return os.pathconf(folder, "PC_NAME_MAX")
        except (OSError, ValueError):  # not there (yet), a name in it already too long, or no answer
            continue
    return _USUAL_NAME_MAX


def overlong_name(path: Path) -> tuple[str, int] | None:
    """The first name in ``path`` longer than its file system takes, with that limit in bytes; None when all fit."""
    limit = name_limit(path)
    return next(((part, limit) for part in path.parts if len(os.fsencode(part)) > limit), None)


def describe_name(part: str) -> str:
    """A name too long to show whole, as a message shows it: its start and its length."""
    shown = part if len(part) <= 40 else f"{part[:40]}..."
    return f"{shown!r} ({len(os.fsencode(part))} bytes)"
