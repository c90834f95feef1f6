"""The summary of one shard, added up from its parts on disk, so a resumed shard counts its earlier chunks too."""

from __future__ import annotations

from collections import defaultdict
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
from specbatch.run.summary import RowTotals, Summary, summarize

# Row columns the summary needs (read back from every part).
_SUMMARY_COLUMNS = [
    "sample_index",
    "category",
    "status",
    "completion_tokens",
    "spec_steps",
    "draft_tokens",
    "accepted_tokens",
]


def summarize_shard(
    folder: RunFolder, job: JobConfig, parts: list[Path], startup_seconds: float, warmup_seconds: float
) -> Summary:
    """From every part of the shard, one part at a time (memory stays flat however many rows there are).

    Counters and seconds come from each launch's record of its loop (engine counter differences, wall time) when
    every part that launch wrote is still its own; otherwise (a killed launch, a part regenerated since) from the
    parts' own figures and the time the launch took up to its last part.
    """
    totals = RowTotals(by_category=job.dataset.category_column is not None)
    by_launch: dict[str | None, list[dict[str, Any]]] = defaultdict(list)
    for number, part in enumerate(parts):
        stats = folder.read_part_stats(number)
        by_launch[stats["launch"]].append({**stats, "number": number})
        for record in pq.read_table(part, columns=_SUMMARY_COLUMNS).to_pylist():
            totals.add(record)
    counters, seconds, scopes, settings = Counters(), 0.0, set(), []
    concurrency = max((s["concurrency"] or 0 for stats in by_launch.values() for s in stats), default=0)
    for launch, stats in by_launch.items():
        record = folder.read_launch_record(launch)
        own = record is not None and sorted(record["parts"]) == sorted(s["number"] for s in stats)
        if own and record["counters"] is not None:
            counters = counters + Counters.from_dict(record["counters"])
            scopes.add(record["counters_scope"])
        else:
            for s in stats:
                counters = counters + Counters.from_dict(s["counters"])
            scopes.add("requests")
        if own:
            seconds += record["seconds"]
            settings.append(record["acceptance_settings"])
        elif launch is None:  # parts whose stats name no launch: each chunk's own time (part_stats)
            seconds += seconds_of_unlaunched(stats)
        else:
            seconds += max(s["elapsed"] for s in stats)
    return summarize(
        counters,
        method=job.spec.method.value,
        k=job.spec.k,
        totals=totals,
        generation_seconds=seconds,
        engine_startup_seconds=startup_seconds,
        warmup_seconds=warmup_seconds,
        concurrency=concurrency or None,
        counters_scope="+".join(sorted(scopes)) or None,
        from_a_server=figures_from_a_server(job),
        # The machine that finishes the shard; each launch's own is in its launch record.
        machine=this_machine().to_dict(),
        acceptance_settings=merged_settings(settings),
        step_buckets=shard_bucket_figures(folder.steps_dir) or None,
    )
