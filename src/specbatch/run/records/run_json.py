"""The run record, ``run.json`` (and its readable copy ``config.yaml``): the run's config, shard count and source
rows, fixed by its first launch. Nothing of a run can be read without it.

Version (``format``): 2. Format 1 is every record written before that key existed: its config may lack fields added
since, and each such field declares the value those runs had (``OLD_RUNS_DEFAULT`` in :mod:`specbatch.config`:
``engine.backend`` vllm, ``spec.k_schedule`` none, ``repeat`` 0). Reading a record fills them in, so every reader sees
today's shape. The file on disk is never rewritten: it belongs to the run, and its digests (run folder, workload)
come out the same either way, because the identities fill in the same declared values.

A new field of the config needs no new format: declare its ``OLD_RUNS_DEFAULT`` and format-1 and format-2 records
both get it. A new format is for a change in the shape of the record itself; its upgrade goes here.

The run folder's name ends in the digest of the config the record holds (``-<digest>[-rep<n>]``, :func:`name_suffix`),
so a record whose config gives another digest (edited by hand) is refused as it is read, by every reader: its rows
were generated from the config the name says, not from the one it now holds.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from specbatch.common.atomic_files import atomic_write_text
from specbatch.config import to_yaml
from specbatch.config.identity import SHORT_DIGEST, recorded_run_folder_digest, with_old_run_defaults
from specbatch.run.records.record_files import RecordError, create_stamped_once, read_checked, refuse_newer

# The format this version writes.
RUN_FORMAT = 2
# The file name: a folder holding it is a run folder.
RUN_RECORD = "run.json"
# The keys its readers index (every version so far wrote them), and what to do when it is damaged.
_KEYS = ("config", "shard_count")
DAMAGED_FIX = "restore it from a copy of the run folder, or generate the run again in a new folder (run_name=<new>)"
# The end of a run folder's name as name_suffix builds it. A folder named otherwise (renamed, copied by hand) carries
# no digest to hold its record to.
_SUFFIX = re.compile(rf"-[0-9a-f]{{{SHORT_DIGEST}}}(?:-rep[0-9]+)?$")


def name_suffix(digest: str, repeat: Any) -> str:
    """The end of a run folder's name (RunFolder.for_job): the digest of its config, and its repeat unless 0."""
    return f"-{digest}{f'-rep{repeat}' if repeat else ''}"


def _check_folder_name(record: dict[str, Any], path: Path) -> None:
    """RecordError when the run folder's name carries the digest of another config than the record's."""
    # Resolved: read from inside the folder (run.json) or through a link, the name is still the folder's own.
    folder, config = path.resolve().parent, record.get("config")
    name = folder.name
    found = _SUFFIX.search(name)
    if found is None or not isinstance(config, dict):
        return
    digest = recorded_run_folder_digest(config)
    expected = None if digest is None else name_suffix(digest, config.get("repeat"))
    if expected is None or found.group() == expected:
        return
    raise RecordError(
        f"{path} does not hold the config its folder was made for: the folder's name carries "
        f"{found.group()[1:]}, the config in it gives {expected[1:]} (edited by hand?)",
        f"restore run.json from a copy of the run folder, or, to keep the edit, move the folder to "
        f"{folder.with_name(name[: found.start()] + expected)} (then it is a run of the edited config)",
    )


def upgrade_run_record(record: dict[str, Any], path: Path) -> dict[str, Any]:
    """A run record as today's version writes it, whatever version wrote it; refused when a newer one did."""
    refuse_newer(record, path, RUN_FORMAT, "run")
    upgraded = {**record, "format": RUN_FORMAT}
    if isinstance(record.get("config"), dict):
        upgraded["config"] = with_old_run_defaults(record["config"])
    return upgraded


def read_run_record(path: Path) -> dict[str, Any] | None:
    """The run record at ``path`` in today's shape, whichever version wrote it; None when there is none;
    RecordError when it is damaged or newer, or when its config is not the one its folder's name carries."""
    record = read_checked(path, _KEYS, RUN_FORMAT, "run", DAMAGED_FIX)
    if record is None:
        return None
    upgraded = upgrade_run_record(record, path)
    _check_folder_name(upgraded, path)
    return upgraded


def claim_run_record(path: Path, record: dict[str, Any]) -> bool:
    """Create run.json, stamped with the format this version writes, unless it exists (atomically: of two racing
    launches one wins); True for the winner."""
    return create_stamped_once(path, record, RUN_FORMAT)


def write_config_yaml(path: Path, config: dict[str, Any]) -> None:
    """The run's config as YAML beside run.json, for people (readers take run.json)."""
    atomic_write_text(path, to_yaml(config))
