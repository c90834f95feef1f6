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
import statistics
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


def _rates(table: StepTable, speculative: bool) -> dict[int, list[float]]:
    """Per bucket, tokens per request per second of each step (speculative: those that verified drafts)."""
    out: dict[int, list[float]] = {}
    for s in table.steps():
        if s.seconds > 0 and bool(s.draft_tokens) == speculative:
            out.setdefault(bucket_of(s.requests), []).append(s.tokens / (s.requests * s.seconds))
    return out


def _welch_t(a: list[float], b: list[float]) -> float:
    va, vb = statistics.variance(a), statistics.variance(b)
    se = math.sqrt(va / len(a) + vb / len(b))
    diff = statistics.fmean(a) - statistics.fmean(b)
    if se == 0:
        return -math.inf if diff < 0 else (math.inf if diff > 0 else 0.0)
    return diff / se


def check(speculative: StepTable, reference: list[StepTable]) -> Verdict | None:
    """The verdict once the speculative stream has MIN_STEPS decoding steps in its busiest bucket and the reference
    has MIN_REFERENCE there; None until then (or when there is nothing to compare it with)."""
    spec = _rates(speculative, True)
    if not spec:
        return None
    bucket = max(spec, key=lambda b: len(spec[b]))
    ours = spec[bucket]
    if len(ours) < MIN_STEPS:
        return None
    plain = [r for table in reference for r in _rates(table, False).get(bucket, [])]
    if len(plain) < MIN_REFERENCE:
        return None
    ratio = statistics.fmean(ours) / statistics.fmean(plain)
    t = _welch_t(ours, plain)
    slower = ratio < 1 - SLOWER_BY and t < -T_SLOWER
    figures = {
        "requests": bucket_label(bucket),
        "speculative_steps": len(ours),
        "plain_steps": len(plain),
        "tok_s_per_request": statistics.fmean(ours),
        "plain_tok_s_per_request": statistics.fmean(plain),
        "ratio": ratio,
        "welch_t": t,
    }
    verdict = "slower" if slower else "not measurably slower"
    why = (
        f"at {bucket_label(bucket)} requests per step, speculation made {statistics.fmean(ours):.2f} tokens per "
        f"request per second over {len(ours)} steps, spec=none {statistics.fmean(plain):.2f} over {len(plain)}: "
        f"{ratio:.2f}x (Welch t {t:.1f}), {verdict}"
    )
    return Verdict(slower, why, figures)
