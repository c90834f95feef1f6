"""spec=auto's check after the hand-over: is the speculative engine measurably slower than spec=none was?

Both are read from their timed steps (specbatch.run.step_log), in the bucket of batch sizes where the speculative
engine has run the most steps, as the tokens each request got per second: over a side's steps, the sum of their
tokens over the sum of requests times seconds, which is what the side's throughput per request was. A mean of per-step
rates is not: it weighs a short step's rate as much as a long one's, so steps that made few tokens quickly (a plain
step) or many slowly (a verification of long drafts) count in the wrong measure. Measured on chat rows at batch 16
before this rule: suffix k 5 ran at 1.02x spec=none's whole-job tok/s, and the mean of per-step rates (over the steps
that drafted) said 0.92x. Every step counts, those that prefill new requests too (both streams run the same kind of
rows, admitted as rows finish) and, on the speculative side, those where nothing was drafted (a step where the
drafter found nothing is part of what speculation costs). spec=none's reference is the pilot's stream (its rows, and
its drain at the hand-over, which times the smaller batches too).

The noise rule: speculation is slower when its rate is below spec=none's by more than SLOWER_BY and Welch's t of the
two sides' per-step rates is below -T_SLOWER (about p < 0.001 one-sided at these step counts): the steps of one stream
vary with what each batch holds, and a one-off hiccup of a shared machine must not send a job back to a slower
set-up. It waits for MIN_STEPS steps of the speculative stream in that bucket, and checks only in buckets where
speculation ran (a step there drafted).
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
    # The rate over all the steps: tokens over request-seconds.
    tokens: float = 0.0
    request_seconds: float = 0.0

    def add(self, tokens: int, requests: int, seconds: float) -> None:
        value = tokens / (requests * seconds)
        self.count += 1
        delta = value - self.mean
        self.mean += delta / self.count
        self.squares += delta * (value - self.mean)
        self.tokens += tokens
        self.request_seconds += requests * seconds

    @property
    def rate(self) -> float:
        return self.tokens / self.request_seconds if self.request_seconds > 0 else 0.0

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
            self._add(table, 0, self.plain)
        self.ours: dict[int, _Moments] = {}
        # The buckets where the speculative stream drafted.
        self.drafted: set[int] = set()
        self.seen = 0

    @staticmethod
    def _add(table: StepTable, start: int, into: dict[int, _Moments], drafted: set[int] | None = None) -> None:
        """Each timed step from ``start`` on into its bucket's moments; ``drafted`` gains the buckets of those that
        verified drafts."""
        for s in table.steps(start):
            if s.seconds > 0 and s.requests > 0:
                into.setdefault(bucket_of(s.requests), _Moments()).add(s.tokens, s.requests, s.seconds)
                if s.draft_tokens and drafted is not None:
                    drafted.add(bucket_of(s.requests))

    def update(self, speculative: StepTable) -> Verdict | None:
        """The verdict once the speculative stream has MIN_STEPS steps in its busiest bucket and the reference has
        MIN_REFERENCE there; None until then (or when there is nothing to compare it with)."""
        self._add(speculative, self.seen, self.ours, self.drafted)
        self.seen = len(speculative)
        if not self.drafted:
            return None
        bucket = max(self.drafted, key=lambda b: self.ours[b].count)
        ours, plain = self.ours[bucket], self.plain.get(bucket, _Moments())
        if ours.count < MIN_STEPS or plain.count < MIN_REFERENCE:
            return None
        ratio = ours.rate / plain.rate if plain.rate > 0 else 1.0
        t = _welch_t(ours, plain)
        slower = ratio < 1 - SLOWER_BY and t < -T_SLOWER
        figures = {
            "requests": bucket_label(bucket),
            "speculative_steps": ours.count,
            "plain_steps": plain.count,
            "tok_s_per_request": ours.rate,
            "plain_tok_s_per_request": plain.rate,
            "ratio": ratio,
            "welch_t": t,
        }
        verdict = "slower" if slower else "not measurably slower"
        why = (
            f"at {bucket_label(bucket)} requests per step, speculation made {ours.rate:.2f} tokens per "
            f"request per second over {ours.count} steps, spec=none {plain.rate:.2f} over {plain.count}: {ratio:.2f}x "
            f"(Welch t "
            f"{t:.1f}), {verdict}"
        )
        return Verdict(slower, why, figures)


def check(speculative: StepTable, reference: list[StepTable]) -> Verdict | None:
    """SwitchCheck's verdict on a whole stream at once."""
    return SwitchCheck(reference).update(speculative)
