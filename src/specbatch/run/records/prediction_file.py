"""A run's prediction, ``prediction/predicted.json`` (each set-up's acceptance profile replayed on the run, with the
rows left out and why) and ``prediction/predicted.parquet`` (the same as a table). What they say is
:mod:`specbatch.prediction`'s; their files are this module's.

Version (``format``, in the JSON): 1; a file without the key is format 1 too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from specbatch.common.atomic_files import atomic_write
from specbatch.run.records.record_files import read_checked, unstamped, write_stamped

PREDICTION_FORMAT = 1
# The folder inside the run folder.
PREDICTION_DIR = "prediction"
_KEYS = ("run", "completions", "skipped", "setups")
_FIX = "predict the run again (python jobs/predict.py <run folder>), which writes it anew"


def write_prediction_files(out: Path, record: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """predicted.json (``record``) and predicted.parquet (``rows``) in ``out``."""
    out.mkdir(exist_ok=True)
    write_stamped(out / "predicted.json", record, PREDICTION_FORMAT)
    table = pa.Table.from_pylist(rows)
    atomic_write(out / "predicted.parquet", lambda tmp: pq.write_table(table, tmp))


def read_prediction(out: Path) -> dict[str, Any] | None:
    """predicted.json in ``out``; None when the run was not predicted; RecordError when damaged or newer."""
    record = read_checked(out / "predicted.json", _KEYS, PREDICTION_FORMAT, "prediction", _FIX)
    return None if record is None else unstamped(record)
