"""Where spec=auto's pilot and measured slices sit in a shard: drawn across it, not its first rows.

A data file is often sorted (by category, by source, by length), so a shard's first rows can be all of one kind: a
pilot made of them predicted n-gram's AL 22-27 % below what the whole chat workload then gave. So the rows the
choice is made on are ``blocks`` runs of consecutive rows spread evenly over the shard, and they are dealt to the
slices in turn: each slice holds rows of every part of the shard, and the set-ups measured against each other run
on the same mix. The rows between the runs are the rest, cut into chunks as any shard's.

A run's ends are placed, within a few rows of where the even spread puts them, where adjacent prompts share the least
prefix: a file often keeps rows that ask about one page or document together, and each one reuses the page's KV its
neighbour left in vLLM's prefix cache. A run that starts or ends inside such a neighbourhood takes its rows away from
the rest: on 1,000 retrieval rows (532 of whose 999 neighbours share a help page) runs cut at fixed places left
spec=auto's prefix-cache hits at 52.0 % of prompt tokens against 54.0 % in the fixed runs, about 3 % of its time.

Everything here depends on the shard's span, its rows and the config alone, so a resumed shard finds each part where
it was (and one whose rows were edited meanwhile is refused by its chunks' digests, as any shard).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from specbatch.config import DatasetConfig
from specbatch.data.prompts import conversation
from specbatch.data.rows import RowSource, SourceRow
from specbatch.run.sharding import chunk_ranges

# At most this many runs of consecutive rows make up the choosing rows: each run ends a chunk of the rest, so more
# would cut the rest into more (smaller) parts.
SPREAD_BLOCKS = 16
# How far (in rows) past its even place a run may start, so that its ends fall where neighbours share no page.
SEAM_WINDOW = 32
# A shared prefix counts in steps of this many characters, about 16 tokens (vLLM's KV block on a GPU; 128 on the
# CPU build): shorter ones, a question's first words, save nothing.
SEAM_CHARS = 64

# The prefix row i shares with row i - 1, in SEAM_CHARS steps: what cutting between them loses.
Seams = Callable[[int], int]


def prompt_text(row: SourceRow, cfg: DatasetConfig) -> str:
    """What a row's first request says, as far as prefix caching sees it: its chat (specbatch.data.prompts), joined."""
    return "\n".join(f"{m['role']}: {m['content']}" for m in conversation(row, 1, [], cfg))


def source_seams(source: RowSource) -> Seams:
    """Seams of ``source``'s rows (in run order), reading only the rows asked about."""
    texts: dict[int, str] = {}

    def text(index: int) -> str:
        if index not in texts:
            texts[index] = prompt_text(source.rows([index])[0], source.cfg)
        return texts[index]

    def seam(index: int) -> int:
        return len(os.path.commonprefix([text(index - 1), text(index)])) // SEAM_CHARS

    return seam


def spread(
    span: range, slices: int, rows_each: int, blocks: int = SPREAD_BLOCKS, seams: Seams | None = None
) -> tuple[list[tuple[int, ...]], list[range]]:
    """``slices`` slices of ``rows_each`` rows drawn across ``span`` (module docstring), and the ranges of rows left
    between them, in order. With ``seams``, each run starts up to SEAM_WINDOW rows late where its two ends cut the
    least shared prefix (the earliest such place). When the slices take nearly every row, they are the span's first
    rows."""
    chosen = slices * rows_each
    assert 0 < chosen <= len(span), "the caller checks that the slices fit in the shard"
    count = min(blocks, chosen)
    # Runs of floor or ceil(chosen / count) rows in stretches of floor or ceil(len / count) rows: a run can outgrow
    # its stretch only when the slices take all but fewer than ``count`` rows; then one run at the start.
    nearly_all = chosen > len(span) - count
    if nearly_all:
        count = 1

    def cut_at(row: int) -> int:
        # The span's own ends cut nothing of this shard.
        return seams(row) if seams is not None and span.start < row < span.stop else 0

    runs = []
    for b in range(count):
        first = span.start + b * len(span) // count
        size = (b + 1) * chosen // count - b * chosen // count
        # A run stays within its stretch, so the runs and the gaps between them keep their order.
        last = min(first + SEAM_WINDOW, span.start + (b + 1) * len(span) // count - size) if not nearly_all else first
        start = min(range(first, last + 1), key=lambda row: (cut_at(row) + cut_at(row + size), row))
        runs.append(range(start, start + size))
    rows = [row for run in runs for row in run]
    dealt = [tuple(rows[j::slices]) for j in range(slices)]
    # Each gap runs from a run's end to the next run (the first: from the span's start to the first run; the last:
    # to the span's end).
    ends = [run.start for run in runs] + [span.stop]
    gaps = [range(start, end) for start, end in zip([span.start] + [run.stop for run in runs], ends, strict=True)]
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
