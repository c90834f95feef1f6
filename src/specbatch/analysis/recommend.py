"""Which method and k to use at each batch size, decided from repeated measurements, never from one lucky run.

Each set-up (method and k at one batch size) is measured over repeats (``-m repeat=0,1,2``). Its speedup is taken
repeat by repeat against the baseline's median tok/s, and summed up as the median and the spread, 1.4826 × the
median absolute deviation (MAD scaled to a standard deviation, as vLLM's tuner does). Both are robust to one
disturbed repeat: on a shared machine one repeat in three often runs beside something else, and a range (max − min)
would then call every gap "noise" and hand the pick to the smaller k. ``jobs/bench.py --schedule`` measured that cost:
with the range, the picks ran 5–11 % behind the best k at three of four batch sizes; with the MAD they are the best
k. The baseline itself is a candidate with median 1.0 and its own run-to-run spread, so "speculation is not worth
it" is decided by the same rule. This follows vLLM's ``benchmarks/sweep/tune_speculative_k.py`` (repeats, median and
MAD, a minimum number of runs, the smaller k within noise), with our own rule for what "within noise" means
(:func:`within_noise`).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass

from specbatch.analysis.comparison_rows import CompareRow
from specbatch.config import spec_caption

# Fewer repeats than this and a spread means nothing: two runs give one difference, which a single background hiccup
# decides; three is also the minimum vLLM's tuner and its docs ask for ("at least three repetitions").
MIN_REPEATS = 3
# The override that measures that many repeats of every set-up of a sweep.
REPEATS_OVERRIDE = "repeat=" + ",".join(str(i) for i in range(MIN_REPEATS))


@dataclass(frozen=True)
class Measured:
    """One set-up's speedups over its repeats, as the rule reads them (the baseline: method ``none``, k None)."""

    method: str
    k: int | None
    median: float
    # 1.4826 × the median absolute deviation of the per-repeat speedups (0.0 with one repeat).
    spread: float
    repeats: int

    @property
    def k_or_zero(self) -> int:
        """k as a schedule writes it: the baseline drafts nothing, k=0."""
        return self.k or 0

    @property
    def caption(self) -> str:
        return spec_caption(self.method, self.k)


# Scales a median absolute deviation to a standard deviation (for normally distributed values).
MAD_TO_SIGMA = 1.4826


def speedup_stats(speedups: list[float]) -> tuple[float, float]:
    """(median, spread) of per-repeat speedups; the spread is MAD_TO_SIGMA × their median absolute deviation."""
    median = statistics.median(speedups)
    return median, MAD_TO_SIGMA * statistics.median(abs(s - median) for s in speedups)


def within_noise(best: Measured, other: Measured) -> bool:
    """Whether ``other`` cannot be told apart from ``best`` by these repeats.

    Precisely: ``best.median − other.median ≤ max(best.spread, other.spread)``, the spread being the scaled MAD of
    each set-up's per-repeat speedups (:func:`speedup_stats`). A gap smaller than how far either set-up typically
    moves between its own repeats could be that movement alone. With one repeat each the spreads are 0 and only an
    exact tie is "within noise"; that case is flagged separately as too few repeats (:data:`MIN_REPEATS`).
    """
    return best.median - other.median <= max(best.spread, other.spread)


def pick(candidates: list[Measured], baseline: Measured | None) -> tuple[Measured, Measured]:
    """(chosen, best): ``best`` has the highest median speedup (the baseline counts, at 1.0 with its spread); the
    chosen one is the smallest k of best's method, or the baseline, that is within the noise of best (the baseline
    counts as k=0). Why smaller: at equal measured speed a smaller k wastes less compute on rejected drafts and loses
    less when the batch grows, and it is the cheaper mistake if the measurement was noise.

    Raises ValueError when there is nothing to pick from.
    """
    pool = ([baseline] if baseline is not None else []) + candidates
    if not pool:
        raise ValueError("no measured set-up to pick from")
    # On an exact tie of medians the smaller k is best already.
    best = max(pool, key=lambda m: (m.median, -m.k_or_zero))
    smaller = [c for c in candidates if c.method == best.method and c.k_or_zero < best.k_or_zero]
    if baseline is not None and best is not baseline:
        smaller.append(baseline)
    tied = [c for c in smaller if within_noise(best, c)]
    return min(tied, key=lambda m: m.k_or_zero, default=best), best


@dataclass(frozen=True)
class Recommendation:
    model: str
    dataset: str
    dtype: str
    batch_size: int
    method: str
    k: int | None
    # The chosen set-up's median speedup over the baseline (1.0 for the baseline).
    speedup: float
    # Each method's own pick among its k at this batch size (noise ties to the smaller k), e.g. {"ngram": 3}.
    best_k_per_method: dict[str, int]
    reason: str
    workload: str = ""
    # The chosen set-up's spread (scaled MAD of its per-repeat speedups, speedup_stats).
    speedup_spread: float = 0.0
    # The highest median measured at this batch size, e.g. "ngram k=5" (may differ from the chosen one).
    best_measured: str = ""
    # Fewest repeats of any set-up at this batch size (baseline included), and whether that is MIN_REPEATS or more.
    repeats: int = 0
    enough_repeats: bool = False
    # Each method against the baseline: its pick's k, or 0 where spec=none wins (what a k schedule writes).
    k_per_method: dict[str, int] | None = None


def measured(row: CompareRow) -> Measured | None:
    if row.speedup_median is None or row.speedup_spread is None:
        return None
    return Measured(row.method, row.k, row.speedup_median, row.speedup_spread, row.repeats)


def recommend(rows: list[CompareRow]) -> list[Recommendation]:
    """One recommendation per workload and batch size that has a baseline and at least one speculative set-up."""
    by_batch: dict[tuple[str, int], list[CompareRow]] = defaultdict(list)
    for row in rows:
        if row.speedup_median is not None:
            by_batch[(row.workload, row.batch_size)].append(row)
    out = []
    for (workload, batch), members in sorted(by_batch.items()):
        base_rows = [r for r in members if r.method == "none"]
        # Fixed k's only: a schedule is what compare writes from these picks, measured against them by jobs/bench.py,
        # never a candidate for one batch size (its k changes with the batch).
        # spec=auto is shown beside them, never recommended: it is what chooses among them. So is another way of
        # verifying or drafting (a variant): it is read against its defaults' row, which keeps one k per method.
        spec_rows = [
            r for r in members if r.method not in ("none", "auto") and r.k_schedule is None and r.variant is None
        ]
        if not base_rows or not spec_rows:
            continue
        baseline = measured(base_rows[0])
        candidates = [m for m in map(measured, spec_rows) if m is not None]
        chosen, best = pick(candidates, baseline)
        methods = sorted({c.method for c in candidates})
        own = {m: pick([c for c in candidates if c.method == m], None)[0] for m in methods}
        against_none = {m: pick([c for c in candidates if c.method == m], baseline)[0].k_or_zero for m in methods}
        # What the pick stands on: the baseline and the fixed k's (a schedule's repeats do not make a pick surer).
        members = base_rows + spec_rows
        repeats = min(r.repeats for r in members)
        top = max(candidates, key=lambda m: (m.median, -m.k_or_zero))
        reason = _reason(chosen, best, baseline, top)
        if repeats < MIN_REPEATS:
            few = ", ".join(f"{spec_caption(r.method, r.k)}: {r.repeats}" for r in members if r.repeats < MIN_REPEATS)
            reason += f"; too few repeats to tell ({few}; at least {MIN_REPEATS} each are needed)"
        first = spec_rows[0]
        out.append(
            Recommendation(
                model=first.model,
                dataset=first.dataset,
                dtype=first.dtype,
                batch_size=batch,
                method=chosen.method,
                k=chosen.k,
                speedup=chosen.median,
                best_k_per_method={m: c.k for m, c in own.items() if c.k is not None},
                reason=reason,
                workload=workload,
                speedup_spread=chosen.spread,
                best_measured=best.caption,
                repeats=repeats,
                enough_repeats=repeats >= MIN_REPEATS,
                k_per_method=against_none,
            )
        )
    return out


def _reason(chosen: Measured, best: Measured, baseline: Measured | None, top: Measured) -> str:
    """Why ``chosen`` won; ``top`` is the speculative set-up with the highest median."""

    def fig(m: Measured) -> str:
        return f"{m.median:.2f}x ±{m.spread:.2f}"

    if chosen is best and chosen.method == "none":
        return f"no speculative set-up beat the baseline (best: {top.caption}, {fig(top)})"
    if chosen is best:
        return f"highest median speedup: {fig(best)} (median ± spread of the repeats, 1.4826 × MAD)"
    if chosen.method == "none":
        assert baseline is not None
        return (
            f"{best.caption} has the highest median ({fig(best)}), but the baseline ({fig(baseline)}) is within "
            "the noise of it: speculation does not pay off measurably here"
        )
    return (
        f"{best.caption} has the highest median ({fig(best)}), but the smaller {chosen.caption} ({fig(chosen)}) is "
        "within the noise of it: the smaller k wins"
    )
