"""The summary of one shard, added up from its parts on disk, so a resumed shard counts its earlier chunks too; for
spec=auto also per set-up that generated its rows (each phase is its own stream, so its launches are its own)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from specbatch.common.machine import this_machine
from specbatch.config import JobConfig
from specbatch.engine import figures_from_a_server
from specbatch.engine.acceptance_settings import merged_settings
from specbatch.engine.spec_metrics import Counters
from specbatch.run.folder import RunFolder
from specbatch.run.records.part_stats import seconds_of_unlaunched
from specbatch.run.step_log import shard_bucket_figures
from specbatch.run.summary import RowTotals, Summary, setup_figures, summarize

# Row columns the summary needs (read back from every part).
_SUMMARY_COLUMNS = [
    "sample_index",
    "category",
    "status",
    "completion_tokens",
    "spec_steps",
    "draft_tokens",
    "accepted_tokens",
    "method",
    "num_speculative_tokens",
]


@dataclass
class _Figures:
    """What some parts add up to: their rows, and their launches' counters and seconds."""

    totals: RowTotals
    # Launch -> the stats of its parts among these (with their numbers).
    launches: dict[str | None, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    # The method and k the rows name (spec=auto: the set-up's; a k schedule names its largest k).
    method: str | None = None
    k: int | None = None
    counters: Counters = field(default_factory=Counters)
    seconds: float = 0.0
    scopes: set[str] = field(default_factory=set)
    settings: list[dict[str, Any] | None] = field(default_factory=list)
    # The batch: the most requests its launches' engines ran at once (0: not recorded).
    concurrency: int = 0

    def add_launches(self, folder: RunFolder) -> None:
        """Counters and seconds from each launch's record of its loop (engine counter differences, wall time) when
        every part that launch wrote is still its own; otherwise from the parts' own figures and the time the launch
        took up to its last part."""
        for launch, stats in self.launches.items():
            self.concurrency = max(self.concurrency, *(s["concurrency"] or 0 for s in stats))
            record = folder.read_launch_record(launch)
            own = record is not None and sorted(record["parts"]) == sorted(s["number"] for s in stats)
            if own and record["counters"] is not None:
                self.counters = self.counters + Counters.from_dict(record["counters"])
                self.scopes.add(record["counters_scope"])
            else:
                for s in stats:
                    self.counters = self.counters + Counters.from_dict(s["counters"])
                self.scopes.add("requests")
            if own:
                self.seconds += record["seconds"]
                self.settings.append(record["acceptance_settings"])
            elif launch is None:  # parts whose stats name no launch: each chunk's own time (part_stats)
                self.seconds += seconds_of_unlaunched(stats)
            else:
                self.seconds += max(s["elapsed"] for s in stats)


def summarize_shard(
    folder: RunFolder,
    job: JobConfig,
    parts: list[Path],
    startup_seconds: float,
    warmup_seconds: float,
    roles: dict[str, list[str]] | None = None,
) -> Summary:
    """From every part of the shard, one part at a time (memory stays flat however many rows there are).

    ``roles``: a spec=auto shard's set-ups and their roles (specbatch.auto): the summary then also holds each
    set-up's figures, its parts grouped by the set-up their stats name (Summary.per_setup).
    """
    by_category = job.dataset.category_column is not None
    groups: dict[str | None, _Figures] = {}
    for number, part in enumerate(parts):
        stats = folder.read_part_stats(number)
        group = groups.setdefault(stats.get("setup"), _Figures(RowTotals(by_category=by_category)))
        group.launches[stats["launch"]].append({**stats, "number": number})
        for record in pq.read_table(part, columns=_SUMMARY_COLUMNS).to_pylist():
            group.totals.add(record)
            group.method, group.k = record["method"], record["num_speculative_tokens"]
    whole = _Figures(RowTotals(by_category=by_category))
    for group in groups.values():
        group.add_launches(folder)
        whole.totals.merge(group.totals)
        whole.counters = whole.counters + group.counters
        whole.seconds += group.seconds
        whole.scopes |= group.scopes
        whole.settings += group.settings
        whole.concurrency = max(whole.concurrency, group.concurrency)
    per_setup = None
    if roles is not None:
        by_setup = {label: _summary(job, g, g.method, g.k) for label, g in groups.items() if label and g.method}
        per_setup = setup_figures(by_setup, roles)
    return _summary(
        job,
        whole,
        job.spec.method.value,
        job.spec.k,
        startup_seconds,
        warmup_seconds,
        step_buckets=shard_bucket_figures(folder.steps_dir) or None,
        per_setup=per_setup,
    )


def _summary(
    job: JobConfig,
    figures: _Figures,
    method: str | None,
    k: int | None,
    startup_seconds: float = 0.0,
    warmup_seconds: float = 0.0,
    **extra: Any,
) -> Summary:
    """The summary of ``figures`` (the shard's, or one set-up's: its own start-up is not told apart)."""
    return summarize(
        figures.counters,
        method=method or job.spec.method.value,
        k=k,
        totals=figures.totals,
        generation_seconds=figures.seconds,
        engine_startup_seconds=startup_seconds,
        warmup_seconds=warmup_seconds,
        concurrency=figures.concurrency or None,
        counters_scope="+".join(sorted(figures.scopes)) or None,
        from_a_server=figures_from_a_server(job),
        # The machine that finishes the shard; each launch's own is in its launch record.
        machine=this_machine().to_dict(),
        acceptance_settings=merged_settings(figures.settings),
        **extra,
    )
