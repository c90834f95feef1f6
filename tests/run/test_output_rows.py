"""Parquet rows: explicit schema, nulls for the baseline, config in the metadata, atomic writes."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specbatch.backends.vllm.vllm_offline import row_figures
from specbatch.data.prompts import Prompt
from specbatch.engine import Sample
from specbatch.run.output_rows import build_output_rows
from specbatch.run.records.output_parts import SCHEMA, read_config_metadata, write_parquet


class FakeMetrics:  # shaped like vLLM's per-request spec decode metrics
    def to_dict(self) -> dict:
        return {
            "acceptance_histogram": [1, 0, 2],
            "num_spec_steps": 3,
            "num_accepted_draft_tokens": 4,
            "num_draft_tokens": 6,
        }


def output(spec: bool) -> list[Sample]:
    """One sample, its figures read the way the vLLM backend reads vLLM's per-request metrics."""
    figures = row_figures(SimpleNamespace(spec_decode_metrics=FakeMetrics() if spec else None))
    return [Sample(text="hi there", token_ids=[5, 6, 7], finish_reason="stop", spec=figures)]


PROMPT = Prompt(row_id="r0", text="say hi", token_ids=[1, 2])


def test_rows_round_trip_with_schema_and_config(tmp_path: Path) -> None:
    rows = build_output_rows(PROMPT, output(True), "ngram", 2) + build_output_rows(PROMPT, output(False), "none", None)
    path = tmp_path / "data" / "part-00000.parquet"
    write_parquet(rows, path, {"spec": {"method": "ngram"}})
    table = pq.read_table(path)
    assert table.schema.remove_metadata() == SCHEMA
    spec_row, base_row = table.to_pylist()
    assert spec_row["spec_steps"] == 3 and spec_row["accepted_tokens"] == 4 and spec_row["draft_tokens"] == 6
    assert spec_row["acceptance_length"] == pytest.approx(1 + 4 / 3)
    assert spec_row["acceptance_histogram"] == [1, 0, 2]
    assert spec_row["prompt_tokens"] == 2 and spec_row["completion_tokens"] == 3
    assert base_row["num_speculative_tokens"] is None and base_row["accepted_tokens"] is None
    assert read_config_metadata(path) == {"spec": {"method": "ngram"}}
    assert os.listdir(path.parent) == ["part-00000.parquet"]


def test_failed_write_leaves_no_file(tmp_path: Path) -> None:
    bad = [{**build_output_rows(PROMPT, output(False), "none", None)[0], "prompt_tokens": "not a number"}]
    path = tmp_path / "part-00000.parquet"
    with pytest.raises((pa.ArrowInvalid, pa.ArrowTypeError)):
        write_parquet(bad, path, {})
    assert list(tmp_path.iterdir()) == []
