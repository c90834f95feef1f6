"""Replayed drafting added up per set-up, overall and per category, and the acceptance profile of a set-up.

The profile (``speculation_profile.json``) is in the form vLLM's synthetic rejection sampler takes
(``rejection_sample_method="synthetic"``, ``synthetic_acceptance_rates``: per-position unconditional rates,
non-increasing, one per draft position): marginal[i] = drafts whose position i was accepted / drafts, and
conditional[i] = the same over the drafts whose position i-1 was accepted. AL = 1 + sum(marginal).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from specbatch.prediction.replay import Drafting, Setup
from specbatch.prediction.turns import ReplayTurn

OVERALL = "(all)"


def acceptance_profile(figures: Drafting, k: int) -> dict[str, Any]:
    """AL, acceptance rate and the per-position rates of ``figures`` (positions 0..k-1)."""
    per_position = (figures.per_position + [0] * k)[:k]
    drafts = figures.drafts
    marginal = [count / drafts if drafts else 0.0 for count in per_position]
    conditional = []
    for position, count in enumerate(per_position):
        before = drafts if position == 0 else per_position[position - 1]
        conditional.append(count / before if before else 0.0)
    return {
        "drafts": drafts,
        "draft_tokens": figures.draft_tokens,
        "accepted_tokens": figures.accepted,
        "unverified_tokens": figures.unverified,
        "acceptance_length": 1.0 + figures.accepted / drafts if drafts else 1.0,
        "acceptance_rate": figures.accepted / figures.draft_tokens if figures.draft_tokens else 0.0,
        "accepted_per_position": per_position,
        "marginal_acceptance": marginal,
        "conditional_acceptance": conditional,
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
