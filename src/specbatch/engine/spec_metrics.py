"""Acceptance figures, with vLLM's own definitions (docs/outputs.md), in engine-neutral records.

Two sources: an engine's cumulative counters (vLLM's ``LLM.get_metrics()``), of which only *differences* mean
anything, and the per-request figures an engine attaches to each completion (vLLM's
``per_request_spec_decode_metrics``). Aggregates always come from summed counts, never from averaged ratios.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Counters:
    """A snapshot of the engine counters, or the difference of two snapshots."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    accepted_per_position: tuple[int, ...] = field(default_factory=tuple)

    @classmethod
    def from_dict(cls, plain: dict[str, Any]) -> Counters:
        """The inverse of ``dataclasses.asdict`` (as stored in JSON: the per-position counts come back as a list)."""
        return cls(**{**plain, "accepted_per_position": tuple(plain["accepted_per_position"])})

    def __sub__(self, before: Counters) -> Counters:
        return self._combine(before, -1)

    def __add__(self, other: Counters) -> Counters:
        return self._combine(other, 1)

    def _combine(self, other: Counters, sign: int) -> Counters:
        mine, theirs = list(self.accepted_per_position), list(other.accepted_per_position)
        n = max(len(mine), len(theirs))
        return Counters(
            prompt_tokens=self.prompt_tokens + sign * other.prompt_tokens,
            generation_tokens=self.generation_tokens + sign * other.generation_tokens,
            drafts=self.drafts + sign * other.drafts,
            draft_tokens=self.draft_tokens + sign * other.draft_tokens,
            accepted_tokens=self.accepted_tokens + sign * other.accepted_tokens,
            accepted_per_position=tuple(a + sign * b for a, b in zip(_pad(mine, n), _pad(theirs, n), strict=True)),
        )


def _pad(values: list[int], n: int) -> list[int]:
    return values + [0] * (n - len(values))


@dataclass(frozen=True)
class RowSpecFigures:
    """Per-request figures of one completion (vLLM's ``RequestSpecDecodeMetrics``).

    An engine that reports drafted and accepted tokens but not its drafting steps (llama.cpp) leaves the steps, the
    acceptance length and the histogram None: then the counters have no drafts, and summaries no AL."""

    spec_steps: int | None
    draft_tokens: int
    accepted_tokens: int
    acceptance_length: float | None
    # histogram[j] = steps in which exactly j draft tokens were accepted, j = 0..k.
    acceptance_histogram: list[int] | None

    def counters(self) -> Counters:
        """What this completion added to the engine counters (drafts = speculative steps)."""
        return Counters(
            drafts=self.spec_steps or 0,
            draft_tokens=self.draft_tokens,
            accepted_tokens=self.accepted_tokens,
            accepted_per_position=tuple(accepted_per_position_from_histogram(self.acceptance_histogram or [])),
        )


def acceptance_length(accepted: int, drafts: int) -> float:
    """Mean acceptance length AL = 1 + accepted / drafts (tokens per target forward pass); 1.0 with no drafts."""
    return 1.0 + accepted / drafts if drafts else 1.0


def steps_unknown(drafts: int, draft_tokens: int) -> bool:
    """Tokens were drafted in no drafting step: the engine reported its draft tokens but not its steps (llama.cpp),
    so AL and per-position rates cannot be known."""
    return draft_tokens > 0 and drafts == 0


def accepted_per_position_from_histogram(histogram: list[int]) -> list[int]:
    """Accepted-at-position i = steps that accepted more than i tokens = sum of histogram[j] for j > i."""
    k = len(histogram) - 1
    return [sum(histogram[j] for j in range(i + 1, k + 1)) for i in range(k)]


def histogram_from_accepted_per_position(drafts: int, accepted_per_position: list[int]) -> list[int]:
    """The inverse: steps that accepted exactly j tokens, j = 0..k, from the steps (``drafts``) and the steps that
    accepted position i (which are those that accepted more than i tokens)."""
    more_than = [drafts, *accepted_per_position, 0]
    return [more_than[j] - more_than[j + 1] for j in range(len(accepted_per_position) + 1)]


def acceptance_profile(drafts: int, draft_tokens: int, accepted_per_position: list[int], k: int) -> dict[str, Any]:
    """Acceptance of ``drafts`` drafting steps, position by position (0..k-1): AL, the draft acceptance rate, and
    marginal[i] = drafts whose position i was accepted / drafts (the per-position *unconditional* rates vLLM's
    synthetic rejection sampler takes as ``synthetic_acceptance_rates``: non-increasing, AL = 1 + their sum) and
    conditional[i] = the same over the drafts whose position i-1 was accepted."""
    per_position = (list(accepted_per_position) + [0] * k)[:k]
    accepted = sum(per_position)
    marginal = [count / drafts if drafts else 0.0 for count in per_position]
    conditional = [
        count / before if before else 0.0
        for count, before in zip(per_position, [drafts, *per_position[:-1]], strict=True)
    ]
    return {
        "drafts": drafts,
        "draft_tokens": draft_tokens,
        "accepted_tokens": accepted,
        "acceptance_length": 1.0 + accepted / drafts if drafts else 1.0,
        "acceptance_rate": accepted / draft_tokens if draft_tokens else 0.0,
        "accepted_per_position": per_position,
        "marginal_acceptance": marginal,
        "conditional_acceptance": conditional,
    }


# What figures from a server's /metrics are worth; said beside them wherever they are shown.
SERVER_WIDE_NOTE = (
    "drafts and acceptance are the server's /metrics over the shard (server-wide): valid when this job was the "
    "server's only client"
)
