"""Where spec=auto's pilot and measured slices sit in a shard (specbatch.auto.cutting): across it, every slice of
every part of it, the rest between them; and, in a whole shard, a pilot that is not the sorted file's first kind."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from test_auto import _force_winner, auto_job

from specbatch.auto.cutting import SPREAD_BLOCKS, rest_chunks, spread
from specbatch.pipeline import run_job


@pytest.mark.parametrize(
    ("span", "slices", "rows_each"),
    [(range(0, 1000), 1, 16), (range(0, 1000), 9, 16), (range(500, 1700), 3, 64), (range(0, 40), 6, 2)],
)
def test_the_slices_are_drawn_across_the_span_and_the_gaps_are_the_rest(span: range, slices: int, rows_each: int):
    dealt, gaps = spread(span, slices, rows_each)
    assert [len(rows) for rows in dealt] == [rows_each] * slices
    chosen = [row for rows in dealt for row in rows]
    rest = [row for gap in gaps for row in gap]
    assert sorted(chosen + rest) == list(span) and len(set(chosen)) == len(chosen)
    assert len(gaps) <= SPREAD_BLOCKS
    # The chosen rows reach the shard's last part, and every slice holds rows of both its halves.
    middle = span.start + len(span) // 2
    runs = min(SPREAD_BLOCKS, slices * rows_each)
    assert max(chosen) >= span.start + (runs - 1) * len(span) // runs
    assert all(rows[0] < middle <= rows[-1] for rows in dealt)


def test_slices_that_take_nearly_every_row_are_the_first_rows() -> None:
    dealt, gaps = spread(range(10, 50), 3, 13)
    assert sorted(row for rows in dealt for row in rows) == list(range(10, 49)) and gaps == [range(49, 50)]
    assert dealt[0][:3] == (10, 13, 16)  # dealt in turn


def test_the_rest_is_cut_within_each_gap_its_head_in_smaller_chunks() -> None:
    chunks = rest_chunks([range(1, 10), range(11, 30)], 8, head_rows=12, head_chunk=4)
    assert [(c.start, c.stop) for c in chunks] == [(1, 5), (5, 9), (9, 10), (11, 14), (14, 22), (22, 30)]
    assert rest_chunks([range(0, 5)], 8) == [range(0, 5)]


def test_a_pilot_of_a_sorted_file_holds_each_of_its_kinds(tmp_path: Path, monkeypatch) -> None:
    """A file sorted by kind, two kinds of 20 rows: the unmeasured pilot (6 rows) holds both, where the file's first
    6 rows are all of the first kind."""
    _force_winner(monkeypatch, "none")
    data = tmp_path / "rows.jsonl"
    kinds = ["translate"] * 20 + ["code"] * 20
    data.write_text("".join(json.dumps({"id": f"r{i:02d}", "q": f"{k} {i}"}) + "\n" for i, k in enumerate(kinds)))
    local = ["dataset=local", f"dataset.path={data}", "dataset.template='{q}'", "dataset.id_column=id"]
    result = run_job(auto_job(tmp_path, *local, "spec.auto.candidates=[none,ngram-k2]", "spec.auto.budget=0"))
    pilot = pq.read_table(result.folder.part_path(0)).to_pylist()
    assert len(pilot) == 6 and {kinds[int(r["row_id"][1:])] for r in pilot} == {"translate", "code"}
    assert len({r["row_id"] for r in pilot}) == 6
