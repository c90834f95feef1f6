"""The step timing of a shard, ``stats/<shard>/steps/<nnnn>.parquet``: one file per stream of the shard (an engine
fed from its first chunk to its last; spec=auto's phases and a resumed launch each add one), one row per engine step.
What the figures mean is specbatch.run.step_log's; the files are this module's.

Columns: ``at`` (seconds from the stream's start to the step's end), ``seconds`` (the step's wall time),
``requests``, ``tokens``, ``prompt_tokens``, ``draft_tokens`` (specbatch.engine.StepLoad). The file's metadata holds
the set-up that ran (``setup``, its label), its k schedule, the engine's batch and the format. A file is created once,
whole (common.atomic_files.create_once), when its stream ends: a kill loses the timing of the stream it hit, never a
row.

Version (``format`` in the metadata): 1; a newer one is refused, a damaged one is named and skipped by readers (the
timing informs spec=auto's cost model; it is no output of the job).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq

from specbatch.common.atomic_files import create_once
from specbatch.run.records.record_files import RecordError, refuse_newer

log = logging.getLogger(__name__)

STEPS_FORMAT = 1
_META_KEY = b"specbatch.steps"
COLUMNS = ("at", "seconds", "requests", "tokens", "prompt_tokens", "draft_tokens")
_SCHEMA = pa.schema(
    [
        ("at", pa.float64()),
        ("seconds", pa.float64()),
        ("requests", pa.int32()),
        ("tokens", pa.int32()),
        ("prompt_tokens", pa.int32()),
        ("draft_tokens", pa.int32()),
    ]
)


class Step(NamedTuple):
    """One row of a steps file."""

    at: float
    seconds: float
    requests: int
    tokens: int
    prompt_tokens: int
    draft_tokens: int


@dataclass
class StepTable:
    """One stream's steps, column by column (COLUMNS, in Step's order), and what ran them."""

    setup: str
    k_schedule: list[list[int]] | None
    concurrency: int | None
    columns: dict[str, list[Any]] = field(default_factory=lambda: {name: [] for name in COLUMNS})

    def __len__(self) -> int:
        return len(self.columns["seconds"])

    def steps(self, start: int = 0) -> Iterator[Step]:
        """The steps from the ``start``-th on, one by one."""
        return map(Step._make, zip(*(self.columns[name][start:] for name in COLUMNS), strict=True))


def write_steps(folder: Path, table: StepTable) -> Path:
    """Write one stream's steps as the next file of ``folder`` (created once: never over another stream's)."""
    folder.mkdir(parents=True, exist_ok=True)
    meta = {"format": STEPS_FORMAT, "setup": table.setup, "k_schedule": table.k_schedule}
    meta["concurrency"] = table.concurrency
    arrow = pa.table({name: table.columns[name] for name in COLUMNS}, schema=_SCHEMA)
    arrow = arrow.replace_schema_metadata({_META_KEY: json.dumps(meta).encode()})
    number = len(list(folder.glob("*.parquet")))
    # Created once: when the name is taken (two launches' streams ending at once), the next number.
    while not create_once(folder / f"{number:04d}.parquet", lambda tmp: pq.write_table(arrow, tmp)):
        number += 1
    return folder / f"{number:04d}.parquet"


def read_steps(path: Path) -> StepTable:
    """One stream's steps; RecordError when the file is damaged or newer."""
    try:
        arrow = pq.read_table(path)
        meta = json.loads((arrow.schema.metadata or {})[_META_KEY])
    except (OSError, ValueError, KeyError, pa.ArrowException) as exc:
        raise RecordError(f"{path} is no step timing file ({type(exc).__name__}: {exc})", "remove it") from None
    refuse_newer(meta, path, STEPS_FORMAT, "steps")
    columns = {name: arrow.column(name).to_pylist() for name in COLUMNS}
    return StepTable(str(meta["setup"]), meta.get("k_schedule"), meta.get("concurrency"), columns)


def read_all_steps(folder: Path) -> list[StepTable]:
    """Every readable stream of ``folder`` in the order written; a damaged file is named in the log and skipped."""
    out = []
    for path in sorted(folder.glob("*.parquet")) if folder.is_dir() else []:
        try:
            out.append(read_steps(path))
        except RecordError as exc:
            log.warning("step timing skipped: %s", exc)
    return out
