"""Which rows a task generates: its shard of the run, cut into chunks that are written one by one.

Shards are contiguous and deterministic (the same count always cuts the same rows), so a rerun of a task finds
the parts it already wrote. Inside a Slurm array the shard comes from the array task variables, minding arrays
that do not start at 0 or that step (``--array=1-7:2``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from specbatch.config import ConfigError, ShardConfig


@dataclass(frozen=True)
class Shard:
    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def resolve_shard(cfg: ShardConfig, env: Mapping[str, str] = os.environ) -> Shard:
    """Explicit shard.index/count win; else the Slurm array task; else the one and only shard."""
    index, count = cfg.index, cfg.count
    if index is None and "SLURM_ARRAY_TASK_ID" in env:
        task = int(env["SLURM_ARRAY_TASK_ID"])
        first = int(env.get("SLURM_ARRAY_TASK_MIN", "0"))
        step = int(env.get("SLURM_ARRAY_TASK_STEP", "1") or 1)
        index = (task - first) // step
    if count is None and "SLURM_ARRAY_TASK_COUNT" in env:
        count = int(env["SLURM_ARRAY_TASK_COUNT"])
    index = 0 if index is None else index
    count = 1 if count is None else count
    if not 0 <= index < count:
        raise ConfigError(
            f"shard {index} is outside shard.count={count} (from the Slurm array variables?): "
            "set shard.index and shard.count explicitly, e.g. shard.index=$SLURM_ARRAY_TASK_ID shard.count=8"
        )
    return Shard(index, count)


def shard_range(num_rows: int, shard: Shard) -> range:
    """Rows [start, end) of this shard: contiguous, sizes differing by at most one."""
    return range(num_rows * shard.index // shard.count, num_rows * (shard.index + 1) // shard.count)


def chunk_ranges(rows: range, chunk_size: int) -> list[range]:
    return [range(start, min(start + chunk_size, rows.stop)) for start in range(rows.start, rows.stop, chunk_size)]
