"""spec=auto's check after the hand-over: is the speculative engine measurably slower than spec=none was?

Both are read from their timed steps (specbatch.run.step_log): per step, the tokens each request got per second,
``tokens / (requests * seconds)``, in the bucket of batch sizes where the speculative engine has run the most steps.
Steps that prefill new requests count on both sides: a stream of short completions admits one in most steps, and
both streams run the same rows, so they hold the same mix. spec=none's reference is the pilot's stream (its rows,
and its drain at the hand-over, which times the smaller batches too); the speculative side is the steps that verified
drafts (a schedule's k = 0 steps are plain ones).

The noise rule: speculation is slower when its mean rate is below spec=none's by more than SLOWER_BY and Welch's t
of the two means is below -T_SLOWER (about p < 0.001 one-sided at these step counts): the steps of one stream vary
with what each batch holds, and a one-off hiccup of a shared machine must not send a job back to a slower set-up.
It waits for MIN_STEPS speculative steps in that bucket, and checks only in buckets where speculation ran (k > 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from specbatch.run.records.steps_file import StepTable
from specbatch.run.step_log import bucket_label, bucket_of

# Speculative steps in one bucket before the check may answer; and the plain steps it needs to compare with.
MIN_STEPS = 24
MIN_REFERENCE = 8
SLOWER_BY = 0.03
T_SLOWER = 3.3


@dataclass(frozen=True)
class Verdict:
    slower: bool
    why: str
    figures: dict[str, Any]


@dataclass
class _Moments:
    """Count, mean and sum of squared deviations of a stream of rates, kept as they come (Welford): the check runs
    every few steps of a stream that may last hours, and must not read every step again each time."""

    count: int = 0
    mean: float = 0.0
    squares: float = 0.0

    def add(self, value: float) -> None:
        self.count += 1
        delta = value - self.mean
        self.mean += delta / self.count
        self.squares += delta * (value - self.mean)

    @property
    def variance(self) -> float:
        return self.squares / (self.count - 1) if self.count > 1 else 0.0


def _welch_t(a: _Moments, b: _Moments) -> float:
    se = math.sqrt(a.variance / a.count + b.variance / b.count)
    diff = a.mean - b.mean
    if se == 0:
        return -math.inf if diff < 0 else (math.inf if diff > 0 else 0.0)
    return diff / se


class SwitchCheck:
    """The check over one speculative stream against spec=none's steps (``reference``, read once): ``update`` takes
    the stream's steps timed since its last call."""

    def __init__(self, reference: list[StepTable]) -> None:
        self.plain: dict[int, _Moments] = {}
        for table in reference:
            self._add(table, 0, False, self.plain)
        self.ours: dict[int, _Moments] = {}
        self.seen = 0

    @staticmethod
    def _add(table: StepTable, start: int, speculative: bool, into: dict[int, _Moments]) -> None:
        """Tokens per request per second of each step from ``start`` on (speculative: those that verified drafts),
        into its bucket's moments."""
        for s in table.steps(start):
            if s.seconds > 0 and bool(s.draft_tokens) == speculative:
                into.setdefault(bucket_of(s.requests), _Moments()).add(s.tokens / (s.requests * s.seconds))

    def update(self, speculative: StepTable) -> Verdict | None:
        """The verdict once the speculative stream has MIN_STEPS steps in its busiest bucket and the reference has
        MIN_REFERENCE there; None until then (or when there is nothing to compare it with)."""
        self._add(speculative, self.seen, True, self.ours)
        self.seen = len(speculative)
        if not self.ours:
            return None
        bucket = max(self.ours, key=lambda b: self.ours[b].count)
        ours, plain = self.ours[bucket], self.plain.get(bucket, _Moments())
        if ours.count < MIN_STEPS or plain.count < MIN_REFERENCE:
            return None
        ratio = ours.mean / plain.mean
        t = _welch_t(ours, plain)
        slower = ratio < 1 - SLOWER_BY and t < -T_SLOWER
        figures = {
            "requests": bucket_label(bucket),
            "speculative_steps": ours.count,
            "plain_steps": plain.count,
            "tok_s_per_request": ours.mean,
            "plain_tok_s_per_request": plain.mean,
            "ratio": ratio,
            "welch_t": t,
        }
        verdict = "slower" if slower else "not measurably slower"
        why = (
            f"at {bucket_label(bucket)} requests per step, speculation made {ours.mean:.2f} tokens per request per "
            f"second over {ours.count} steps, spec=none {plain.mean:.2f} over {plain.count}: {ratio:.2f}x (Welch t "
            f"{t:.1f}), {verdict}"
        )
        return Verdict(slower, why, figures)


def check(speculative: StepTable, reference: list[StepTable]) -> Verdict | None:
    """SwitchCheck's verdict on a whole stream at once."""
    return SwitchCheck(reference).update(speculative)
