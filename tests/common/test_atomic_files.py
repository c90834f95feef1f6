"""One atomic write: a reader sees the whole file or none, and a writer's temporary file has one findable name."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from specbatch.common.atomic_files import (
    atomic_write,
    atomic_write_json,
    atomic_write_text,
    create_json_once,
    temporaries_in,
    temporary_path,
)


def test_the_temporary_name_is_hidden_beside_the_file_and_found_by_the_clean_up(tmp_path: Path) -> None:
    target = tmp_path / "data" / "part-00003.parquet"
    tmp = temporary_path(target)
    assert tmp.parent == target.parent and tmp.name == f".part-00003.parquet.tmp-{os.getpid()}"
    target.parent.mkdir()
    tmp.write_bytes(b"half")
    (target.parent / ".part-00001.parquet.tmp-999").write_bytes(b"a killed writer's")
    target.write_bytes(b"whole")
    assert [p.name for p in temporaries_in(target.parent)] == [".part-00001.parquet.tmp-999", tmp.name]
    assert temporaries_in(tmp_path / "absent") == []


def test_a_failed_write_leaves_neither_the_file_nor_its_temporary(tmp_path: Path) -> None:
    target = tmp_path / "out" / "comparison.parquet"

    def full_disk(tmp: Path) -> None:
        tmp.write_bytes(b"PAR1 half a file")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        atomic_write(target, full_disk)
    assert list(target.parent.iterdir()) == []


def test_the_callback_runs_before_the_rename_so_its_records_come_first(tmp_path: Path) -> None:
    target, record = tmp_path / "part.bin", tmp_path / "part.json"

    def write(tmp: Path) -> None:
        tmp.write_bytes(b"rows")
        assert not target.exists()
        atomic_write_json(record, {"bytes": tmp.stat().st_size})

    atomic_write(target, write)
    assert target.read_bytes() == b"rows" and json.loads(record.read_text()) == {"bytes": 4}
    assert temporaries_in(tmp_path) == []


def test_text_and_json_forms(tmp_path: Path) -> None:
    atomic_write_text(tmp_path / "a.txt", "x\n")
    atomic_write_json(tmp_path / "b.json", {"b": 1, "a": [1]})
    assert (tmp_path / "a.txt").read_text() == "x\n"
    assert (tmp_path / "b.json").read_text() == '{\n  "a": [\n    1\n  ],\n  "b": 1\n}\n'


def test_create_once_lets_exactly_the_first_writer_win(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    assert create_json_once(path, {"shard_count": 2})
    assert not create_json_once(path, {"shard_count": 3})
    assert json.loads(path.read_text()) == {"shard_count": 2} and temporaries_in(tmp_path) == []
