"""spec=auto's choice per batch occupancy: for each predictable candidate, tokens per pass from the replay and step
costs measured here (specbatch.auto.costs) give a predicted speedup at every batch size; a method that vLLM runs with
a k per batch size (``spec.k_schedule``) gets the best of its ks at each size, k = 0 where none of them pays.

Predicted speedup of a set-up at batch size b, tokens per pass tau and draft tokens per request-pass d:
``tau * t0(b) / t(b, d)`` (each pass makes tau tokens per request, where a plain step makes one); at k = 0,
``t0(b) / (t0(b) * (1 + k0_overhead))``, below 1: the method's engine still runs its proposer. The method whose
schedule (or fixed k, for one that cannot follow a schedule) is predicted to save the most time over the rest of the
shard wins, if what it saves exceeds what the switch costs (an engine start-up); otherwise spec=none stays.

Where the rest of the shard spends its steps: the bulk at the job's batch, then its last wave drains, the batch
falling as the pilot's completion lengths say (:func:`step_shares`); the schedule gives each bucket of batch sizes
(powers of two, as specbatch.run.step_log counts them) its own k.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from specbatch.auto.costs import StepCosts
from specbatch.methods import METHODS, SpecMethod, spec_label
from specbatch.run.step_log import bucket_label, bucket_of

# A bucket speculates only where it is predicted this much faster than spec=none: the tokens per pass are the
# replay's, and speculation's own costs are the prior until a speculative engine has run here.
BUCKET_MARGIN = 1.05
# The set-up running now is left only for a choice predicted to save this share of the rest more than it: a smaller
# gain is within the step fit's error, and what a change in place costs is not priced (a k 0 bucket's overhead
# fitted on a few idle steps). On jobs/bench.py --auto's help-desk cell a revision switched on "0.0 s saved".
KEEP_MARGIN = 0.01


@dataclass(frozen=True)
class Option:
    """A predictable candidate as the schedule reads it."""

    label: str
    method: SpecMethod
    k: int
    tokens_per_pass: float
    draft_tokens_per_pass: float


@dataclass(frozen=True)
class Choice:
    """The chosen method and its k per bucket (None: spec=none), with what was predicted."""

    method: SpecMethod | None
    # (first batch size, last batch size, k) covering 1..batch; k = 0 where speculation does not pay.
    schedule: list[tuple[int, int, int]]
    predicted_speedup: float
    saved_seconds: float
    buckets: list[dict[str, Any]]
    why: str

    @property
    def fixed_k(self) -> int | None:
        """The one k of a schedule that has the same k at every batch size (no schedule needed)."""
        ks = {k for _, _, k in self.schedule}
        return ks.pop() if len(ks) == 1 else None

    @property
    def label(self) -> str:
        if self.method is None or not any(k for _, _, k in self.schedule):
            return "none"
        k = self.fixed_k
        if k is not None:
            return spec_label(self.method.value, k)
        return spec_label(self.method.value, max(k for _, _, k in self.schedule), [list(e) for e in self.schedule])


def buckets_up_to(batch: int) -> list[tuple[int, int]]:
    """The (first, last) batch sizes of each bucket up to ``batch``."""
    out, first = [], 1
    while first <= batch:
        out.append((first, min(2 * first - 1, batch)))
        first *= 2
    return out


def step_shares(batch: int, requests_left: int, lengths: list[float]) -> dict[int, float]:
    """Plain steps the rest of the shard spends in each bucket (by its first batch size), from the lengths of the
    pilot's completions (tokens: a plain step makes one per request). The bulk runs at ``batch``; once the last row
    is admitted the batch drains. The requests running then were admitted at different times, so each has a uniform
    part of its length left, and longer ones are more likely among them: ``s`` steps into the drain,
    ``wave * sum(max(L - s, 0)) / sum(L)`` requests still run."""
    shares = dict.fromkeys((first for first, _ in buckets_up_to(batch)), 0.0)
    total = sum(lengths)
    if not lengths or requests_left <= 0 or total <= 0:
        return shares
    wave = min(batch, requests_left)
    shares[bucket_of(batch)] += max(requests_left - wave, 0) * total / len(lengths) / batch
    for step in range(int(max(lengths))):
        running = wave * sum(max(length - step, 0.0) for length in lengths) / total
        if running >= 1:
            shares[bucket_of(int(running))] += 1
    return shares


def _speedup(option: Option, costs: StepCosts, requests: float) -> float:
    plain = costs.plain(requests)
    return option.tokens_per_pass * plain / costs.speculative_pass(requests, option.draft_tokens_per_pass)


def choose(
    options: list[Option],
    costs: StepCosts,
    batch: int,
    requests_left: int,
    lengths: list[float],
    switch_seconds: float,
    stays: Callable[[SpecMethod | None, int | None], bool] | None = None,
    running: str | None = None,
) -> Choice:
    """The method and schedule predicted to save the most time over the rest of the shard, net of the switch to it
    (module docstring). ``stays(method, k)`` says which set-ups run in the engine open now without a new start (k
    None: any k of that method, or a schedule of it; method None: spec=none); the others cost ``switch_seconds``.
    By default only spec=none stays (a pilot on spec=none). ``running`` (an option's label, or none) is kept unless
    the best choice saves KEEP_MARGIN of the rest more than it."""
    free = stays or (lambda method, k: method is None)
    buckets = buckets_up_to(batch)
    shares = step_shares(batch, requests_left, lengths)
    # Each bucket at the mean of its batch sizes (the bulk's at the batch itself).
    at = {first: (batch if first == bucket_of(batch) else (first + last) / 2) for first, last in buckets}
    plain_seconds = {first: shares[first] * costs.plain(at[first]) for first, _ in buckets}
    total_plain = sum(plain_seconds.values())
    by_method: dict[SpecMethod, list[Option]] = {}
    for option in options:
        by_method.setdefault(option.method, []).append(option)
    best: Choice | None = None
    best_net = 0.0
    for method, own in by_method.items():
        schedulable = METHODS[method].k_schedule_refusal is None
        # A method that cannot follow a schedule runs one k everywhere: each of its ks is a choice of its own.
        groups = [own] if schedulable else [[o] for o in own]
        for group in groups:
            choice = _choose_ks(method, group, costs, buckets, at, plain_seconds, total_plain, schedulable)
            if choice.label == "none":
                # Off everywhere in the method's engine is slower than spec=none itself. But where the engine open
                # now runs one of its ks in place, keeping that k is an option: spec=none would cost a start-up.
                kept = [o for o in group if free(method, o.k)]
                if not kept:
                    continue
                fixed = [_choose_ks(method, [o], costs, buckets, at, plain_seconds, total_plain, False) for o in kept]
                choice = max(fixed, key=lambda c: c.saved_seconds)
            staying = free(method, None) or free(method, choice.fixed_k)
            net = choice.saved_seconds - (0.0 if staying else switch_seconds)
            if best is None or net > best_net:
                best, best_net = choice, net
    none_net = 0.0 if free(None, None) else -switch_seconds
    own = next((o for o in options if o.label == running and free(o.method, o.k)), None)
    if best is not None and own is not None and best.label != running:
        kept = _choose_ks(own.method, [own], costs, buckets, at, plain_seconds, total_plain, False)
        more = best_net - kept.saved_seconds
        if more < KEEP_MARGIN * (total_plain - kept.saved_seconds):
            short = f"{-more:.1f} s less" if more < 0 else f"{more:.1f} s more, under {KEEP_MARGIN:.0%} of the rest"
            why = f"{best.label} would save {short}: {running} is kept"
            best, best_net = replace(kept, why=f"{kept.why}; {why}"), kept.saved_seconds
    if best is None:
        why = "no candidate is predicted to save time"
    elif best_net <= none_net:
        why = (
            f"{best.label} is predicted to save {best.saved_seconds:.1f} s of the rest, less than the "
            f"{switch_seconds:.1f} s the switch costs (an engine start-up)"
        )
    elif running == "none" and free(None, None) and best_net < KEEP_MARGIN * total_plain:
        why = f"{best.label} is predicted to save {best_net:.1f} s, under {KEEP_MARGIN:.0%} of the rest"
    else:
        return best
    rest = "spec=none stays" if free(None, None) else "spec=none runs the rest"
    return Choice(None, [(1, batch, 0)], 1.0, 0.0, best.buckets if best else [], f"{why}: {rest}")


def _choose_ks(
    method: SpecMethod,
    options: list[Option],
    costs: StepCosts,
    buckets: list[tuple[int, int]],
    at: dict[int, float],
    plain_seconds: dict[int, float],
    total_plain: float,
    schedulable: bool,
) -> Choice:
    rows, entries, total = [], [], 0.0
    for first, last in buckets:
        speedups = {o.k: _speedup(o, costs, at[first]) for o in options}
        k, speedup = max(speedups.items(), key=lambda item: (item[1], -item[0]))
        if schedulable and speedup < BUCKET_MARGIN:
            # Off here, but in the method's engine: its steps cost k0_overhead more than spec=none's would.
            k, speedup = 0, costs.plain(at[first]) / costs.drafting_nothing(at[first])
        total += plain_seconds[first] / speedup
        entries.append((first, last, k))
        rows.append(
            {
                "requests": bucket_label(first)
                if last == 2 * first - 1
                else str(first)
                if first == last
                else f"{first}-{last}",
                "k": k,
                "predicted_speedup": speedup,
                "plain_step_seconds": costs.plain(at[first]),
                "speculative_pass_seconds": (
                    costs.speculative_pass(at[first], next(o for o in options if o.k == k).draft_tokens_per_pass)
                    if k
                    else None
                ),
            }
        )
    schedule = _merged(entries)
    overall = total_plain / total if total > 0 else 1.0
    saved = total_plain - total
    label = spec_label(method.value, options[0].k) if not schedulable else method.value
    measured = "measured" if costs.speculative_measured else "its own costs not measured yet"
    why = (
        f"{label} is predicted {overall:.2f}x spec=none over the rest of the shard ({saved:.1f} s saved; plain steps "
        f"measured, speculation {measured})"
    )
    return Choice(method, schedule, overall, saved, rows, why)


def _range_label(first: int, last: int) -> str:
    """A bucket as the step log names it, or its part up to the batch (``256``, ``128-200``)."""
    if last == 2 * first - 1:
        return bucket_label(first)
    return str(first) if first == last else f"{first}-{last}"


def _merged(entries: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """Neighbouring ranges of one k as one."""
    out: list[tuple[int, int, int]] = []
    for first, last, k in entries:
        if out and out[-1][2] == k:
            out[-1] = (out[-1][0], last, k)
        else:
            out.append((first, last, k))
    return out


def caption(method: str | None, schedule: list[list[int]] | list[tuple[int, int, int]] | None, k: int | None) -> str:
    """How people read the choice: ``ngram, k 3 below batch 8, 1 up to 32, off above``; ``ngram k=3`` for one k."""
    if method is None or method == "none":
        return "none"
    if not schedule:
        return f"{method} k={k}" if k is not None else method
    parts = []
    for i, (_, last, kk) in enumerate(schedule):
        what = f"k {kk}" if kk else "off"
        if i == 0 and len(schedule) > 1:
            parts.append(f"{what} below batch {last + 1}")
        elif i == len(schedule) - 1 and len(schedule) > 1:
            parts.append(f"{'off' if not kk else kk} above")
        else:
            parts.append(f"{kk if kk else 'off'} up to {last}" if len(schedule) > 1 else f"{what} at every batch")
    return f"{method}, " + ", ".join(parts)
