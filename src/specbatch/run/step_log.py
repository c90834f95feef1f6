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

import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from specbatch.engine import StepLoad
from specbatch.run.records.steps_file import Step, StepTable, read_all_steps, write_steps


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


def bucket_figures(tables: Iterable[StepTable]) -> dict[str, list[dict[str, Any]]]:
    """Per set-up, per occupancy bucket: steps, median step seconds, requests, tokens and draft tokens per step, and
    output tok/s (its tokens over its steps' seconds)."""
    by_setup: dict[str, dict[int, list[Step]]] = {}
    for table in tables:
        buckets = by_setup.setdefault(table.setup, {})
        for step in table.steps():
            buckets.setdefault(bucket_of(step.requests), []).append(step)
    out: dict[str, list[dict[str, Any]]] = {}
    for setup, buckets in by_setup.items():
        rows = []
        for bucket in sorted(buckets):
            steps = buckets[bucket]
            seconds = sum(s.seconds for s in steps)
            tokens = sum(s.tokens for s in steps)
            rows.append(
                {
                    "requests": bucket_label(bucket),
                    "steps": len(steps),
                    "median_step_seconds": statistics.median(s.seconds for s in steps),
                    "requests_per_step": sum(s.requests for s in steps) / len(steps),
                    "tokens_per_step": tokens / len(steps),
                    "draft_tokens_per_step": sum(s.draft_tokens for s in steps) / len(steps),
                    "tok_s": tokens / seconds if seconds > 0 else None,
                }
            )
        out[setup] = rows
    return out


def shard_bucket_figures(steps_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """The shard's bucket figures from every stream it timed."""
    return bucket_figures(read_all_steps(steps_dir))
