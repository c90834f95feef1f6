"""Acceptance figures, with vLLM's own definitions (DESIGN.md "Metrics").

Two sources: the engine's cumulative counters (``LLM.get_metrics()``), of which only *differences* around a
generate call mean anything, and the per-request figures vLLM attaches to each completion when the engine runs
with ``per_request_spec_decode_metrics``. Aggregates always come from summed counts, never from averaged ratios.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

# vLLM metric names (vLLM 0.32; all cumulative over the life of the LLM).
PROMPT_TOKENS = "vllm:prompt_tokens"
GENERATION_TOKENS = "vllm:generation_tokens"
NUM_DRAFTS = "vllm:spec_decode_num_drafts"
NUM_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
NUM_ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
_SCALAR_FIELDS = {
    PROMPT_TOKENS: "prompt_tokens",
    GENERATION_TOKENS: "generation_tokens",
    NUM_DRAFTS: "drafts",
    NUM_DRAFT_TOKENS: "draft_tokens",
    NUM_ACCEPTED: "accepted_tokens",
}


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
    def from_metrics(cls, metrics: Iterable[Any]) -> Counters:
        """Sum each counter over its label sets (one per engine when data-parallel)."""
        total = cls()
        for metric in metrics:
            if metric.name in _SCALAR_FIELDS:
                total = total + cls(**{_SCALAR_FIELDS[metric.name]: int(metric.value)})
            elif metric.name == ACCEPTED_PER_POS:
                total = total + cls(accepted_per_position=tuple(int(v) for v in metric.values))
        return total

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
    """Per-request figures of one completion (vLLM's ``RequestSpecDecodeMetrics``)."""

    spec_steps: int
    draft_tokens: int
    accepted_tokens: int
    acceptance_length: float
    # histogram[j] = steps in which exactly j draft tokens were accepted, j = 0..k.
    acceptance_histogram: list[int]

    @classmethod
    def from_output(cls, completion: Any) -> RowSpecFigures | None:
        metrics = getattr(completion, "spec_decode_metrics", None)
        if metrics is None:
            return None
        d = metrics.to_dict()
        steps, accepted = int(d["num_spec_steps"]), int(d["num_accepted_draft_tokens"])
        return cls(
            spec_steps=steps,
            draft_tokens=int(d["num_draft_tokens"]),
            accepted_tokens=accepted,
            acceptance_length=acceptance_length(accepted, steps),
            acceptance_histogram=[int(x) for x in d["acceptance_histogram"]],
        )


def acceptance_length(accepted: int, drafts: int) -> float:
    """Mean acceptance length AL = 1 + accepted / drafts (tokens per target forward pass); 1.0 with no drafts."""
    return 1.0 + accepted / drafts if drafts else 1.0


def accepted_per_position_from_histogram(histogram: list[int]) -> list[int]:
    """Accepted-at-position i = steps that accepted more than i tokens = sum of histogram[j] for j > i."""
    k = len(histogram) - 1
    return [sum(histogram[j] for j in range(i + 1, k + 1)) for i in range(k)]
