"""What every record of a run folder shares: how a damaged or newer record is refused, and the version stamp.

Each record kind has one owner module in this package (see its ``__init__``): the record's version, its read, its
write and its upgrade from what older versions wrote. This module only holds what they share, so that a reader of
any record refuses a damaged or newer one the same way: a RecordError whose one line names the file, what is wrong
and what to do.

A record's version is its ``format`` key. A record that has none is format 1: the key came later than the record, so
files written before it read as their first version and no old file is ever rewritten.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specbatch.common.atomic_files import atomic_write_json, create_json_once
from specbatch.config import ConfigError

# The key holding a record's version; absent means format 1.
FORMAT_KEY = "format"


class RecordError(ConfigError):
    """A record of a run folder that this version cannot read: ``problem`` names the file and what is wrong with it,
    ``fix`` what to do. A ConfigError, so that a job refuses it in one line like a mistake in its config."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(f"{problem}: {fix}")
        self.problem, self.fix = problem, fix


def format_of(record: dict[str, Any]) -> Any:
    """The version a record was written in (1 when it carries none)."""
    return record.get(FORMAT_KEY, 1)


def refuse_newer(record: dict[str, Any], path: Path, newest: int, name: str) -> None:
    """Raise RecordError when ``record`` (at ``path``) was written in a format above ``newest`` of ``name``."""
    found = format_of(record)
    if not isinstance(found, int) or found > newest:
        raise RecordError(
            f"{path} was written by a newer version of specbatch ({name} format {found}; this one reads formats up "
            f"to {newest})",
            "read it with that version, or update this checkout",
        )


def read_json_if_present(path: Path) -> Any:
    """The JSON at ``path``, or None when there is no file."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


def read_checked(path: Path, keys: tuple[str, ...], newest: int, name: str, fix: str) -> dict[str, Any] | None:
    """The JSON object at ``path`` (None when there is none) holding ``keys``, in a format up to ``newest`` of
    ``name``; RecordError naming the file, what is wrong and ``fix`` otherwise."""
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except ValueError as exc:  # cut short or overwritten: not JSON (or not even text)
        raise RecordError(f"{path} is damaged (not JSON: {exc})", fix) from None
    if not isinstance(record, dict):
        raise RecordError(f"{path} is damaged (not a JSON object)", fix)
    refuse_newer(record, path, newest, name)
    missing = [key for key in keys if key not in record]
    if missing:
        raise RecordError(f"{path} is damaged (it lacks {', '.join(missing)})", fix)
    return record


def unstamped(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` without its version: what its readers index (for the records that had none at first, so that
    they read the same whichever version wrote them)."""
    return {key: value for key, value in record.items() if key != FORMAT_KEY}


def stamped(record: dict[str, Any], version: int) -> dict[str, Any]:
    """``record`` with the version it is written in first."""
    return {FORMAT_KEY: version, **record}


def write_stamped(path: Path, record: dict[str, Any], version: int) -> None:
    """Write ``record`` at ``path`` (atomically) stamped with ``version``."""
    atomic_write_json(path, stamped(record, version))


def create_stamped_once(path: Path, record: dict[str, Any], version: int) -> bool:
    """Create ``path`` with ``record`` stamped with ``version`` unless it exists; True for the one that did."""
    return create_json_once(path, stamped(record, version))
