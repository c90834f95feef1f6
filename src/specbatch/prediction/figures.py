"""Replayed drafting added up per set-up, overall and per category, and the acceptance profile of a set-up.

The profile is the one every speculative run writes (specbatch.run.speculation_profile; the arithmetic is
engine.spec_metrics.acceptance_profile), in the form vLLM's synthetic rejection sampler takes.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from specbatch.engine import spec_metrics
from specbatch.prediction.replay import Drafting
from specbatch.prediction.setups import Setup
from specbatch.prediction.turns import ReplayTurn
from specbatch.run.speculation_profile import OVERALL


def acceptance_profile(figures: Drafting, k: int) -> dict[str, Any]:
    """AL, acceptance rate and the per-position rates of ``figures`` (positions 0..k-1; engine.spec_metrics), its
    draft tokens past a completion's end, how many of those the engine is expected to have accepted, and the AL
    with them (what to hold against the engine's AL)."""
    profile = spec_metrics.acceptance_profile(figures.drafts, figures.draft_tokens, figures.per_position, k)
    expected = figures.expected_unverified_accepted()
    estimate = 1 + (figures.accepted + expected) / figures.drafts if figures.drafts else 1.0
    return {
        **profile,
        "unverified_tokens": figures.unverified,
        "unverified_expected_accepted": expected,
        "acceptance_length_estimate": estimate,
    }


def predicted_rows(setup: Setup, replayed: list[tuple[ReplayTurn, Drafting]]) -> list[dict[str, Any]]:
    """One row per category and one over all (``OVERALL``): the set-up, the rows replayed and their profile."""
    by_category: dict[str, Drafting] = defaultdict(Drafting)
    rows: dict[str, set[str]] = defaultdict(set)
    for turn, figures in replayed:
        for category in (OVERALL, turn.category or ""):
            by_category[category].add(figures)
            rows[category].add(turn.row_id)
    categories = [OVERALL] + sorted(c for c in by_category if c != OVERALL)
    if set(categories) == {OVERALL, ""}:
        categories = [OVERALL]  # no categories in this data set
    return [
        {
            "setup": setup.label,
            "method": setup.method,
            "k": setup.k,
            "category": category,
            "rows": len(rows[category]),
            "completions": sum(1 for turn, _ in replayed if category in (OVERALL, turn.category or "")),
            **acceptance_profile(by_category[category], setup.k),
        }
        for category in categories
    ]
