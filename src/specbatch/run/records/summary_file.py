"""The shard summary, ``stats/<shard>.json``, and the merged run's, ``merged/summary.json``: a
:class:`specbatch.run.summary.Summary` as JSON (what the figures mean is that module's; their file is this one's).

Version: 1. The file carries no ``format`` key, and this version writes none: the summary is also logged to MLflow
and read by people and other tools as it is, field for field; a file with a key ``format`` above 1 is refused, so a
later shape can stamp its files. Fields were added within version 1, and a read gives the ones a file lacks the
value that says "not recorded" (null): per-position counts, categories, the batch (``concurrency``: null when the
engine was not yet streamed and the batch was a chunk, see :func:`batch_caps`), where the counts come from,
the machine, the settings that change acceptance, the prompts, why acceptance figures were refused, the
figures of the timed engine steps per batch-occupancy bucket, and spec=auto's figures per set-up.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specbatch.common.atomic_files import atomic_write_json
from specbatch.run.records.record_files import FORMAT_KEY, refuse_newer
from specbatch.run.summary import Summary

SUMMARY_FORMAT = 1
# Fields added since the first summaries, with their value in summaries written without them.
_ADDED = dict.fromkeys(
    [
        "accepted_per_position",
        "per_category",
        "concurrency",
        "counters_scope",
        "machine",
        "acceptance_settings",
        "prompts",
        "acceptance_doubt",
        "step_buckets",
        "per_setup",
    ]
)


def read_summary(path: Path) -> Summary:
    """The summary at ``path``; FileNotFoundError when there is none, ValueError or TypeError when it is not a
    summary (half-written, or another file), RecordError when a newer version wrote it."""
    record = json.loads(path.read_text())
    if not isinstance(record, dict):
        raise TypeError(f"{path} holds no JSON object")
    refuse_newer(record, path, SUMMARY_FORMAT, "summary")
    record.pop(FORMAT_KEY, None)
    return Summary(**{**_ADDED, **record})


def write_summary(path: Path, summary: Summary) -> None:
    atomic_write_json(path, summary.to_dict())


def summary_problem(path: Path, root: Path) -> str | None:
    """What is wrong with the summary file at ``path`` (missing, half-written, not a summary), or None."""
    where = path.relative_to(root)
    try:
        read_summary(path)
    except FileNotFoundError:
        return f"{where} is missing"
    except (ValueError, TypeError) as exc:  # not JSON, or JSON that is no summary
        return f"{where} is damaged ({type(exc).__name__})"
    return None


def batch_caps(summary: Summary, config: dict[str, Any]) -> list[int]:
    """What capped the batch of a run with ``summary`` and ``config`` (its run record's): its ``concurrency``; for a
    summary without one (written before the engine was streamed, it ran one chunk per generate call) its chunk_size
    and engine.max_num_seqs (when set)."""
    if summary.concurrency:
        return [summary.concurrency]
    sizes = [config["chunk_size"]]
    if config["engine"].get("max_num_seqs"):
        sizes.append(config["engine"]["max_num_seqs"])
    return sizes
