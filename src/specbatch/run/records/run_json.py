"""The run record, ``run.json`` (and its readable copy ``config.yaml``): the run's config, shard count and source
rows, fixed by its first launch. Nothing of a run can be read without it.

Version (``format``): 2. Format 1 is every record written before that key existed: its config may lack fields added
since, and each such field declares the value those runs had (``OLD_RUNS_DEFAULT`` in :mod:`specbatch.config`:
``engine.backend`` vllm, ``spec.k_schedule`` none, ``repeat`` 0). Reading a record fills them in, so every reader sees
today's shape. The file on disk is never rewritten: it belongs to the run, and its digests (run folder, workload)
come out the same either way, because the identities fill in the same declared values.

A new field of the config needs no new format: declare its ``OLD_RUNS_DEFAULT`` and format-1 and format-2 records
both get it. A new format is for a change in the shape of the record itself; its upgrade goes here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specbatch.common.atomic_files import atomic_write_text
from specbatch.config import to_yaml
from specbatch.config.identity import with_old_run_defaults
from specbatch.run.records.record_files import create_stamped_once, read_checked, refuse_newer

# The format this version writes.
RUN_FORMAT = 2
# The file name: a folder holding it is a run folder.
RUN_RECORD = "run.json"
# The keys its readers index (every version so far wrote them), and what to do when it is damaged.
_KEYS = ("config", "shard_count")
_FIX = "restore it from a copy of the run folder, or generate the run again in a new folder (run_name=<new>)"


def upgrade_run_record(record: dict[str, Any], path: Path) -> dict[str, Any]:
    """A run record as today's version writes it, whatever version wrote it; refused when a newer one did."""
    refuse_newer(record, path, RUN_FORMAT, "run")
    upgraded = {**record, "format": RUN_FORMAT}
    if isinstance(record.get("config"), dict):
        upgraded["config"] = with_old_run_defaults(record["config"])
    return upgraded


def read_run_record(path: Path) -> dict[str, Any] | None:
    """The run record at ``path`` in today's shape, whichever version wrote it; None when there is none;
    RecordError when it is damaged or newer."""
    record = read_checked(path, _KEYS, RUN_FORMAT, "run", _FIX)
    return None if record is None else upgrade_run_record(record, path)


def claim_run_record(path: Path, record: dict[str, Any]) -> bool:
    """Create run.json, stamped with the format this version writes, unless it exists (atomically: of two racing
    launches one wins); True for the winner."""
    return create_stamped_once(path, record, RUN_FORMAT)


def write_config_yaml(path: Path, config: dict[str, Any]) -> None:
    """The run's config as YAML beside run.json, for people (readers take run.json)."""
    atomic_write_text(path, to_yaml(config))
