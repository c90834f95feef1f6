"""Writing a file so that a reader sees the whole of it or nothing: write a temporary name beside it, then rename.

Every writer of the package goes through ``atomic_write`` (or its text / JSON forms), so there is one temporary-name
scheme, ``.<name>.tmp-<pid>``: hidden (readers listing ``part-*.parquet`` never take it), in the final file's folder
(the rename stays on one file system, so it is atomic), and named after its writer's process. ``temporaries_in``
knows exactly that scheme, so what a killed writer left behind can be found and removed.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

# What marks a temporary name: ".<name>" + TEMPORARY_MARK + "<pid>".
TEMPORARY_MARK = ".tmp-"


def temporary_path(path: Path) -> Path:
    """The temporary name this process writes ``path`` under."""
    return path.with_name(f".{path.name}{TEMPORARY_MARK}{os.getpid()}")


def temporaries_in(folder: Path) -> list[Path]:
    """Temporary files in ``folder`` (of any writer, live or killed), by the one scheme ``temporary_path`` uses."""
    return sorted(folder.glob(f".*{TEMPORARY_MARK}*")) if folder.is_dir() else []


@contextlib.contextmanager
def temporary_beside(path: Path) -> Iterator[Path]:
    """The temporary name of ``path`` (its folder created), removed on the way out unless it was renamed into place:
    a failed write (e.g. a full disk) leaves no half file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_path(path)
    try:
        yield tmp
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Call ``write(tmp)`` to write the file's content at a temporary name, then rename it to ``path``.

    ``write`` may do more before the rename, which is the commit: e.g. record the temporary file's checksum
    elsewhere, so the file never exists without its record.
    """
    with temporary_beside(path) as tmp:
        write(tmp)
        os.replace(tmp, path)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(text))


def _json_text(data: Any) -> str:
    """How every JSON file of the package is written: indented, keys sorted, ending in a newline."""
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def atomic_write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, _json_text(data))


def create_once(path: Path, write: Callable[[Path], None]) -> bool:
    """Create ``path`` with what ``write(tmp)`` writes at its temporary name, unless ``path`` exists; True if this
    call created it.

    The complete file is hard-linked into place, which fails when the name exists: of two processes racing to
    create it, exactly one wins and neither ever sees half a file.
    """
    with temporary_beside(path) as tmp:
        write(tmp)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        return True


def create_json_once(path: Path, data: Any) -> bool:
    """Create ``path`` with ``data`` unless it exists (:func:`create_once`); True if this call created it."""
    return create_once(path, lambda tmp: tmp.write_text(_json_text(data)))
