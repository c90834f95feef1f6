"""How a method and its k (or k schedule) are written: run folder labels, MLflow run names, captions in figures and
tables. Labels name existing run folders and seed their samples, so a label that fits is never changed."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import PurePath
from typing import Any

# A k per batch size: [[first batch size, last batch size, k], ...] (spec.k_schedule), as plain lists or tuples.
Schedule = Sequence[Sequence[int]]

# Ranges beyond which a folder name would get unwieldy; the digest beside it keeps longer schedules apart anyway.
_LABELLED_RANGES = 6
# The longest readable part of a run folder's name (run_name, or the label in its place), in bytes: with the digest
# and the repeat suffix it stays within the 255 a folder name may have on common file systems.
READABLE_NAME_BYTES = 200
# Digits of a schedule's number beyond which a label too long for a folder name writes it short (10**250 - 1 as
# 9e249): such a schedule's digest keeps it apart, and a label any run folder had keeps its numbers whole.
_WHOLE_DIGITS = 6


def spec_label(method: str, k: int | None, schedule: Schedule | None = None) -> str:
    """Readable method label, e.g. ``ngram-k3``, ``none`` or, for a k schedule, ``ngram-sched-1to4k5-5to256k0``:
    run folders, MLflow run names, comparison metrics (filesystem-safe: letters, digits, ``-``)."""
    if schedule:
        label = _schedule_label(method, schedule, str)
        # Labels that fit are never changed: they name existing run folders and seed their samples.
        return label if len(label) <= READABLE_NAME_BYTES else _schedule_label(method, schedule, _short_number)
    return method if k is None else f"{method}-k{k}"


def _schedule_label(method: str, schedule: Schedule, number: Callable[[int], str]) -> str:
    parts = [f"{number(first)}to{number(last)}k{number(kk)}" for first, last, kk in schedule]
    if len(parts) > _LABELLED_RANGES:
        parts = [*parts[: _LABELLED_RANGES - 1], f"{len(parts) - _LABELLED_RANGES + 1}more"]
    return f"{method}-sched-" + "-".join(parts)


def _short_number(value: int) -> str:
    digits = str(value)
    return digits if len(digits) <= _WHOLE_DIGITS else f"{digits[0]}e{len(digits) - 1}"


def spec_caption(method: str, k: int | None, schedule: Schedule | None = None) -> str:
    """The method as figures, tables and recommendations write it, e.g. ``ngram k=3``, ``none`` or, for a k
    schedule, ``ngram k schedule 1-4:5 5-256:0`` (batch sizes first-last: k)."""
    if schedule:
        return f"{method} k schedule " + " ".join(f"{first}-{last}:{kk}" for first, last, kk in schedule)
    return method if k is None else f"{method} k={k}"


# vLLM's ways of verifying and drafting (spec knobs) and their defaults; null means the default too.
MODE_DEFAULTS: dict[str, Any] = {
    "rejection_sample_method": "standard",
    "draft_sample_method": "greedy",
    "use_heterogeneous_vocab": False,
}


def modes_set(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The modes a spec section (recorded, or a SpecConfig's values) sets other than vLLM's defaults, in
    MODE_DEFAULTS' order; absent keys (runs recorded before these knobs) are defaults."""
    values = {knob: spec.get(knob) for knob in MODE_DEFAULTS}
    return {knob: v for knob, v in values.items() if v is not None and v != MODE_DEFAULTS[knob]}


def variant_caption(spec: Mapping[str, Any]) -> str | None:
    """How a recorded ``spec`` section verifies or drafts other than vLLM's defaults, as compare names the set-up
    beside its method and k, e.g. ``block verification``; None for the defaults (and runs recorded before these
    knobs). Two runs of one method and k that differ here are two set-ups, never repeats of one."""
    words = {
        "rejection_sample_method": "{} verification",
        "draft_sample_method": "{} drafts",
        "use_heterogeneous_vocab": "heterogeneous vocabulary",
    }
    parts = [words[knob].format(value) for knob, value in modes_set(spec).items()]
    rates = spec.get("synthetic_acceptance_rates")
    if rates:
        parts.insert(0, simulated_caption(rates, spec.get("profile"), spec.get("draft_coverage")))
    return ", ".join(parts) or None


def simulated_caption(rates: Sequence[float], profile: str | None, coverage: float | None) -> str:
    """A set-up run at a given acceptance, e.g. ``simulated at the acceptance of ngram-k3-1a2b3c4d (drafts at 64%
    of steps)``: the run folder its profile came from (a profile's file name is always the same), or the rates."""
    share = "" if coverage is None or coverage >= 1 else f" (drafts at {coverage:.0%} of steps)"
    if not profile:
        return "simulated at acceptance rates " + "/".join(f"{r:g}" for r in rates) + share
    path = PurePath(profile)
    # <run>/merged/speculation_profile.json, <run>/stats/<shard>/speculation_profile.json, or any file.
    parents = [p.name for p in path.parents]
    source = parents[1] if parents[:1] == ["merged"] else parents[2] if parents[1:2] == ["stats"] else path.stem
    return f"simulated at the acceptance of {source}{share}"


def schedule_key(schedule: Schedule | None) -> tuple[tuple[int, int, int], ...] | None:
    """A schedule as a hashable, comparable value (for grouping runs); None for a fixed k."""
    return tuple((int(a), int(b), int(c)) for a, b, c in schedule) if schedule else None
