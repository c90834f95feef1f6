"""Where spec=auto's pilot and measured slices sit in a shard: drawn across it, not its first rows.

A data file is often sorted (by category, by source, by length), so a shard's first rows can be all of one kind: a
pilot made of them predicted n-gram's AL 22-27 % below what the whole chat workload then gave. So the rows the
choice is made on are ``blocks`` runs of consecutive rows spread evenly over the shard, and they are dealt to the
slices in turn: each slice holds rows of every part of the shard, and the set-ups measured against each other run
on the same mix. The rows between the runs are the rest, cut into chunks as any shard's.

Everything here depends on the shard's span and the config alone, so a resumed shard finds each part where it was.
"""

from __future__ import annotations

from collections.abc import Sequence

from specbatch.run.sharding import chunk_ranges

# At most this many runs of consecutive rows make up the choosing rows: each run ends a chunk of the rest, so more
# would cut the rest into more (smaller) parts.
SPREAD_BLOCKS = 16


def spread(
    span: range, slices: int, rows_each: int, blocks: int = SPREAD_BLOCKS
) -> tuple[list[tuple[int, ...]], list[range]]:
    """``slices`` slices of ``rows_each`` rows drawn across ``span`` (module docstring), and the ranges of rows left
    between them, in order. When the slices take nearly every row, they are the span's first rows."""
    chosen = slices * rows_each
    assert 0 < chosen <= len(span), "the caller checks that the slices fit in the shard"
    count = min(blocks, chosen)
    # Runs of floor or ceil(chosen / count) rows in stretches of floor or ceil(len / count) rows: a run can outgrow
    # its stretch only when the slices take all but fewer than ``count`` rows; then one run at the start.
    if chosen > len(span) - count:
        count = 1
    runs = []
    for b in range(count):
        first = span.start + b * len(span) // count
        size = (b + 1) * chosen // count - b * chosen // count
        runs.append(range(first, first + size))
    rows = [row for run in runs for row in run]
    dealt = [tuple(rows[j::slices]) for j in range(slices)]
    # The first run starts the span; each gap runs from a run's end to the next run (the last: to the span's end).
    ends = [run.start for run in runs[1:]] + [span.stop]
    gaps = [range(run.stop, end) for run, end in zip(runs, ends, strict=True)]
    return dealt, [gap for gap in gaps if gap]


def rest_chunks(
    gaps: list[range], chunk_size: int, head_rows: int = 0, head_chunk: int | None = None
) -> list[Sequence[int]]:
    """The rows of ``gaps`` in order, cut into chunks of ``chunk_size`` (each within one gap): the first
    ``head_rows`` of them in chunks of at most ``head_chunk``."""
    out: list[Sequence[int]] = []
    left = head_rows
    for gap in gaps:
        if left > 0 and head_chunk:
            head = range(gap.start, min(gap.stop, gap.start + left))
            out += chunk_ranges(head, min(head_chunk, chunk_size))
            left -= len(head)
            gap = range(head.stop, gap.stop)
        out += chunk_ranges(gap, chunk_size)
    return [chunk for chunk in out if chunk]
