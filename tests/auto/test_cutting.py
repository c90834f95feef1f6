"""Where spec=auto's pilot and measured slices sit in a shard (specbatch.auto.cutting): across it, every slice of
every part of it, the rest between them; and, in a whole shard, a pilot that is not the sorted file's first kind."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from test_auto import _force_winner, _rows, auto_job

from specbatch.auto.cutting import SEAM_CHARS, SEAM_WINDOW, SPREAD_BLOCKS, rest_chunks, spread
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


def _pages(rows: int, group: int) -> list[int]:
    """The page each row asks about: runs of ``group`` rows share one, with a row alone between two runs."""
    pages, page = [], 0
    while len(pages) < rows:
        pages += [page] * (1 if page % 2 else group)
        page += 1
    return pages[:rows]


@pytest.mark.parametrize(("span", "slices", "rows_each"), [(range(0, 1000), 1, 16), (range(0, 1000), 9, 16)])
def test_runs_end_where_neighbours_stop_sharing_a_page(span: range, slices: int, rows_each: int) -> None:
    """Rows sorted by the page they ask about (runs of 3 sharing one, a row alone between): no run of chosen rows
    starts or ends inside a page's rows, so the rest keeps every neighbour's prefix in the cache; without seams, or
    where no two rows share anything, the runs sit at their even places."""
    pages = _pages(span.stop, 3)

    def seams(row: int) -> int:
        return 10 if pages[row] == pages[row - 1] else 0

    dealt, gaps = spread(span, slices, rows_each, seams=seams)
    chosen = {row for rows in dealt for row in rows}
    assert len(chosen) == slices * rows_each and chosen.isdisjoint(row for gap in gaps for row in gap)
    assert sorted(chosen | {row for gap in gaps for row in gap}) == list(span)
    cut = [row for row in span[1:] if (row in chosen) != (row - 1 in chosen) and seams(row)]
    assert cut == []
    fixed, _ = spread(span, slices, rows_each)
    fixed_rows = {row for rows in fixed for row in rows}
    assert [row for row in span[1:] if (row in fixed_rows) != (row - 1 in fixed_rows) and seams(row)]
    assert spread(span, slices, rows_each, seams=lambda row: 0) == spread(span, slices, rows_each)
    # Moved by at most SEAM_WINDOW rows, so still spread over the whole span.
    assert max(chosen) >= span.stop - len(span) // SPREAD_BLOCKS - 1 - SEAM_WINDOW


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


def test_a_pilot_of_a_file_sorted_by_page_takes_no_row_from_its_neighbours(tmp_path: Path, monkeypatch) -> None:
    """40 rows, each asking about a page it shares with its neighbours (runs of 2, a row alone between): the
    unmeasured pilot's 6 rows are rows alone with their page, so every other row follows the one it shares a page
    with, as in a fixed run, and its prompt's prefix is still in the cache (the even places, 0, 6, 13, 20, 26, 33,
    would split four pages)."""
    _force_winner(monkeypatch, "none")
    pages = _pages(40, 2)
    data = tmp_path / "rows.jsonl"
    text = "a help page about one service, long enough to fill a block of the prefix cache. " * 2
    assert len(text) >= 2 * SEAM_CHARS
    lines = [{"id": f"r{i:02d}", "page": f"Page {p}: {text}", "q": f"question {i}"} for i, p in enumerate(pages)]
    data.write_text("".join(json.dumps(line) + "\n" for line in lines))
    local = ["dataset=local", f"dataset.path={data}", "dataset.template='{page}\\n\\n{q}'", "dataset.id_column=id"]
    result = run_job(auto_job(tmp_path, *local, "spec.auto.candidates=[none,ngram-k2]", "spec.auto.budget=0"))
    pilot = [int(r["row_id"][1:]) for r in pq.read_table(result.folder.part_path(0)).to_pylist()]
    assert len(pilot) == 6
    assert all(pages.count(pages[row]) == 1 for row in pilot), [pages[row] for row in pilot]
    rows = _rows(result.folder)
    assert len(rows) == 40 == len({r["row_id"] for r in rows})
