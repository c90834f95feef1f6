"""A run's prediction, ``prediction/predicted.json`` (each set-up's acceptance profile replayed on the run, with the
rows left out and why) and ``prediction/predicted.parquet`` (the same as a table). What they say is
:mod:`specbatch.prediction`'s; their files are this module's.

Version (``format``, in the JSON): 2, each set-up a speculation profile in ModelOpt's schema 1.0, ``measured``
false (specbatch.run.profile_schema). Format 1 (also a file without the key) held each set-up in specbatch's own
shape of a profile: read, each is upgraded as a speculation profile of format 1 is (records.profile_file), its
set-up, completions and draft tokens past a completion's end kept under ``specbatch``. The Parquet table is the same
in both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from specbatch.common.atomic_files import atomic_write
from specbatch.run.records.profile_file import upgrade_profile
from specbatch.run.records.record_files import format_of, read_checked, unstamped, write_stamped

PREDICTION_FORMAT = 2
# The folder inside the run folder.
PREDICTION_DIR = "prediction"
_KEYS = ("run", "completions", "skipped", "setups")
_FIX = "predict the run again (python jobs/predict.py <run folder>), which writes it anew"
# What a set-up of format 1 kept beside its figures, kept under ``specbatch`` when it is upgraded.
_FORMAT_1_SETUP = (
    "setup",
    "completions",
    "unverified_tokens",
    "unverified_expected_accepted",
    "acceptance_length_estimate",
)


def write_prediction_files(out: Path, record: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """predicted.json (``record``) and predicted.parquet (``rows``) in ``out``."""
    out.mkdir(exist_ok=True)
    write_stamped(out / "predicted.json", record, PREDICTION_FORMAT)
    table = pa.Table.from_pylist(rows)
    atomic_write(out / "predicted.parquet", lambda tmp: pq.write_table(table, tmp))


def read_prediction(out: Path) -> dict[str, Any] | None:
    """predicted.json in ``out``; None when the run was not predicted; RecordError when damaged or newer."""
    record = read_checked(out / "predicted.json", _KEYS, PREDICTION_FORMAT, "prediction", _FIX)
    if record is None:
        return None
    if format_of(record) == 1:
        record["setups"] = [
            upgrade_profile(setup, measured=False, ours={key: setup[key] for key in _FORMAT_1_SETUP if key in setup})
            for setup in record["setups"]
        ]
    return unstamped(record)
