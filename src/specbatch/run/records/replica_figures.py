"""A Ray launch's replicas, ``stats/<shard>/replicas-<launch>.json``: each engine replica's own figures (which node,
its engine's start-up, the chunks, rows and tokens it answered, its AL and tok/s). The shard's figures are the parts'
own, added up as for any launch; this file says how the replicas shared them, for MLflow and for people.
Version (``format``): 1. Written when the launch's loop ends; a killed launch leaves none.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specbatch.run.records.record_files import RecordError, read_checked, unstamped, write_stamped

REPLICAS_FORMAT = 1
_FIX = "remove it: it only says how a launch's replicas shared its chunks"


def replica_figures_path(stats_dir: Path, launch: str) -> Path:
    return stats_dir / f"replicas-{launch}.json"


def write_replica_figures(path: Path, replicas: list[dict[str, Any]]) -> None:
    write_stamped(path, {"replicas": replicas}, REPLICAS_FORMAT)


def read_all_replica_figures(stats_dir: Path) -> list[dict[str, Any]]:
    """Every replica of every Ray launch of the shard, launch by launch (damaged files are skipped: RecordError's
    message is logged by the caller's choice, the figures are not needed by anything that counts)."""
    out: list[dict[str, Any]] = []
    for path in sorted(stats_dir.glob("replicas-*.json")):
        try:
            record = read_checked(path, ("replicas",), REPLICAS_FORMAT, "replicas", _FIX)
        except RecordError:
            continue
        if record is not None:
            out.extend(unstamped(record)["replicas"])
    return out
