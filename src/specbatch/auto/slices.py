"""What the written slices of a spec=auto phase say: their rates for the decision, and those that timed nothing.

A slice is one chunk of a phase (the pilot's or a measured set-up's), written with its figures
(stats/<shard>/part-<n>.json: the set-up that generated it, its generated tokens, its seconds). A slice whose rows
were all error rows (e.g. the data's first rows are placeholders) generated no tokens: its rate is 0 tok/s, which no
speedup may be taken against, so the decision reads which slices those are and why (specbatch.auto.decision).
"""

from __future__ import annotations

import pyarrow.parquet as pq

from specbatch.run.folder import RunFolder
from specbatch.run.output_rows import STATUS_OK

# Characters of an error row's reason quoted where a slice of no tokens says why.
ERROR_SHOWN = 120


def slice_rates(folder: RunFolder, numbers: list[int], label: str) -> list[tuple[int, float]]:
    """(generated tokens, seconds) of each written slice of ``numbers`` that ``label`` generated."""
    out = []
    for number in numbers:
        if not folder.part_stats_path(number).exists():
            continue
        stats = folder.read_part_stats(number)
        # A part without a set-up of its own is the run's; one without an elapsed time timed nothing of its own.
        if stats.get("setup", label) != label or not stats["elapsed"]:
            continue
        out.append((int(stats["counters"]["generation_tokens"]), float(stats["elapsed"])))
    return out


def silent_pilot(folder: RunFolder, pilot: list[int]) -> str | None:
    """Says so when the pilot's slices are in and none generated a token: a decision input that timed nothing.
    None when the pilot generated tokens (or is not written yet)."""
    written = [n for n in pilot if folder.part_stats_path(n).exists()]
    if not written or _silent(folder, written) != written:
        return None
    return f"the pilot generated no tokens ({_error_rows(folder, written)})"


def no_tokens(folder: RunFolder, numbers: list[int]) -> str | None:
    """What a set-up's slices that generated no tokens say of themselves (decision.json's candidate rows); None
    when every slice generated some."""
    silent = _silent(folder, numbers)
    if not silent:
        return None
    return f"{len(silent)} of {len(numbers)} slice(s) generated no tokens ({_error_rows(folder, silent)})"


def _silent(folder: RunFolder, numbers: list[int]) -> list[int]:
    """The written slices of ``numbers`` that generated no tokens."""
    written = [n for n in numbers if folder.part_stats_path(n).exists()]
    return [n for n in written if not folder.read_part_stats(n)["counters"]["generation_tokens"]]


def _error_rows(folder: RunFolder, numbers: list[int]) -> str:
    """How many of these slices' output rows are error rows, with the first one's reason."""
    rows = [r for n in numbers for r in pq.read_table(folder.part_path(n), columns=["status", "error"]).to_pylist()]
    errors = [r["error"] for r in rows if r["status"] != STATUS_OK]
    shown = errors[0] if not errors or len(errors[0]) <= ERROR_SHOWN else errors[0][:ERROR_SHOWN] + "…"
    example = f", e.g. {shown!r}" if errors else ""
    return f"{len(errors)} of {len(rows)} output rows were error rows{example}"
