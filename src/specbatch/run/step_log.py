"""Step timing: every engine step of a stream, its wall time beside what the engine says the step held
(specbatch.engine.StepLoad: requests, tokens produced, prompt tokens prefilled, draft tokens verified), and the
figures per batch-occupancy bucket that people and spec=auto's cost model read.

The streaming loop drives every step, so the timing is two clock reads and six appends per step (well under 1 % of
a step: ``python -m specbatch.bench.step_overhead``). A backend that cannot tell what its steps held (a server's
requests are not its steps) has no ``last_step``, and nothing is timed. Each stream's steps are written once, whole,
when the stream ends (specbatch.run.records.steps_file); the shard's bucket figures come from all of them.

Buckets are powers of two of the step's requests (1, 2-3, 4-7, ...), so that the tail of a job, where the batch
empties, is seen apart from its full batch.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from specbatch.engine import StepLoad
from specbatch.run.records.steps_file import StepTable, read_all_steps, write_steps


class StepLog:
    """The steps of one stream, as the loop records them (``table``: the stream's steps so far)."""

    def __init__(self, setup: str, k_schedule: list[list[int]] | None, concurrency: int | None) -> None:
        self.table = StepTable(setup, k_schedule, concurrency)

    @property
    def setup(self) -> str:
        return self.table.setup

    def record(self, at: float, seconds: float, load: StepLoad) -> None:
        """One step that ended ``at`` seconds into the stream and took ``seconds``; steps that ran nothing (the
        engine waited) are not steps of the batch and are left out."""
        if not load.requests:
            return
        c = self.table.columns
        c["at"].append(at)
        c["seconds"].append(seconds)
        c["requests"].append(load.requests)
        c["tokens"].append(load.tokens)
        c["prompt_tokens"].append(load.prompt_tokens)
        c["draft_tokens"].append(load.draft_tokens)

    def __len__(self) -> int:
        return len(self.table)

    def write(self, folder: Path) -> Path | None:
        """The stream's file in ``folder`` (none for a stream without a timed step)."""
        return write_steps(folder, self.table) if len(self) else None


def bucket_of(requests: int) -> int:
    """The bucket of a step of ``requests`` requests: the power of two at or below it."""
    return 1 << (max(requests, 1).bit_length() - 1)


def bucket_label(bucket: int) -> str:
    return "1" if bucket == 1 else f"{bucket}-{2 * bucket - 1}"


# What a bucket's figures add up from (so that shards' add up exactly, as the summary's other counts do).
_SUMS = ("steps", "seconds", "requests", "tokens", "draft_tokens")


def bucket_figures(tables: Iterable[StepTable]) -> dict[str, dict[str, dict[str, float]]]:
    """Per set-up, per occupancy bucket (by its label): the sums of its steps (_SUMS) and what they give, the mean
    step seconds and output tok/s (its tokens over its steps' seconds)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for table in tables:
        buckets = out.setdefault(table.setup, {})
        for step in table.steps():
            sums = buckets.setdefault(bucket_label(bucket_of(step.requests)), dict.fromkeys(_SUMS, 0.0))
            sums["steps"] += 1
            for name in _SUMS[1:]:
                sums[name] += getattr(step, name)
    return {setup: _derived(buckets) for setup, buckets in out.items()}


def merged_bucket_figures(
    figures: Iterable[dict[str, dict[str, dict[str, float]]] | None],
) -> dict[str, dict[str, dict[str, float]]] | None:
    """Several shards' bucket figures as one, from their sums; None when none of them has any."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for each in figures:
        for setup, buckets in (each or {}).items():
            for label, theirs in buckets.items():
                sums = out.setdefault(setup, {}).setdefault(label, dict.fromkeys(_SUMS, 0.0))
                for name in _SUMS:
                    sums[name] += theirs[name]
    return {setup: _derived(buckets) for setup, buckets in out.items()} or None


def bucket_totals(figures: dict[str, dict[str, dict[str, float]]] | None) -> dict[str, float]:
    """The sums (_SUMS) over every set-up and bucket of a summary's bucket figures: a run's steps, their seconds..."""
    totals = dict.fromkeys(_SUMS, 0.0)
    for buckets in (figures or {}).values():
        for sums in buckets.values():
            for name in _SUMS:
                totals[name] += sums.get(name, 0)
    return totals


def _derived(buckets: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """Buckets in ascending order, each with its mean step seconds and tok/s beside its sums."""
    out = {}
    for label in sorted(buckets, key=lambda b: int(b.split("-")[0])):
        sums = {name: buckets[label][name] for name in _SUMS}
        sums["seconds_per_step"] = sums["seconds"] / sums["steps"]
        sums["tok_s"] = sums["tokens"] / sums["seconds"] if sums["seconds"] > 0 else 0.0
        out[label] = sums
    return out


def shard_bucket_figures(steps_dir: Path) -> dict[str, dict[str, dict[str, float]]]:
    """The shard's bucket figures from every stream it timed."""
    return bucket_figures(read_all_steps(steps_dir))
