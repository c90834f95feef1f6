"""Run records written by older versions of the job, read as today's: the one place that knows how they differ.

``run.json`` carries ``format``. Format 1 is every record written before that key existed: its config may lack
fields added since, and each such field declares the value those runs had (``OLD_RUNS_DEFAULT`` in
:mod:`specbatch.config`: ``engine.backend`` vllm, ``spec.k_schedule`` none, ``repeat`` 0). Reading a record fills
them in, so every reader sees today's shape and none has to know what was "written before". The file on disk is never
rewritten: it belongs to the run, and its digests (run folder, workload) come out the same either way, because the
identities fill in the same declared values.

The shard's own records (``stats/<shard>/``) are read through here too: a part's stats and a launch's record get the
keys added since, with what they meant for the records written without them, so their readers index them plainly.

An output part's rows gain columns from version to version (specbatch.run.output_rows: ``SCHEMA_VERSION``); a reader
of a column an older part lacks reads it as null, except the request's ``seed`` (schema 5), which older parts had
too, only unrecorded: :func:`seed_before_schema_5` derives it as that version did.

A new field of the config needs no new format: declare its ``OLD_RUNS_DEFAULT`` and format-1 and format-2 records
both get it. A new format is for a change in the shape of the record itself; its upgrade goes here.

spec=auto's ``decision.json`` and each shard's ``auto-plan.json`` carry ``format`` too (``DECISION_FORMAT``). A record
this version cannot read (written by a newer one, or damaged: see specbatch.run.folder's readers) is a RecordError.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specbatch.config import ConfigError, sample_seed, spec_label
from specbatch.config.identity import with_old_run_defaults

# The format this version writes into run.json.
RUN_FORMAT = 2
# The format this version writes into spec=auto's decision.json and auto-plan.json (specbatch.auto.generation).
DECISION_FORMAT = 1


class RecordError(ConfigError):
    """A record of a run folder that this version cannot read: ``problem`` names the file and what is wrong with it,
    ``fix`` what to do. A ConfigError, so that a job refuses it in one line like a mistake in its config."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(f"{problem}: {fix}")
        self.problem, self.fix = problem, fix


def refuse_newer(record: dict[str, Any], path: Path, newest: int, name: str) -> None:
    """Raise RecordError when ``record`` (at ``path``) was written in a format above ``newest`` of ``name``."""
    found = record.get("format", 1)
    if not isinstance(found, int) or found > newest:
        raise RecordError(
            f"{path} was written by a newer version of specbatch ({name} format {found}; this one reads formats up "
            f"to {newest})",
            "read it with that version, or update this checkout",
        )


def upgrade_run_record(record: dict[str, Any], path: Path) -> dict[str, Any]:
    """A run record as today's version writes it, whatever version wrote it; refused when a newer one did."""
    refuse_newer(record, path, RUN_FORMAT, "run")
    upgraded = {**record, "format": RUN_FORMAT}
    if isinstance(record.get("config"), dict):
        upgraded["config"] = with_old_run_defaults(record["config"])
    return upgraded


# Keys of a part's stats added since the first version, with their value in stats written without them: the launch
# that wrote the part (none: one generate call per chunk, before the engine was streamed), the part's size and
# checksum (none: only its Parquet footer can be checked), the engine's batch (unknown).
_PART_STATS_ADDED = {"launch": None, "part": None, "concurrency": None}
# Keys of a launch record added since: whose work its counters count (before the key: this job's engine alone), and
# the settings that change acceptance (not recorded before).
_LAUNCH_RECORD_ADDED = {"counters_scope": "engine", "acceptance_settings": None}


def upgrade_part_stats(stats: dict[str, Any]) -> dict[str, Any]:
    """A part's stats (stats/<shard>/part-<n>.json) with every key today's version writes."""
    return {**_PART_STATS_ADDED, **stats}


def upgrade_launch_record(record: dict[str, Any]) -> dict[str, Any]:
    """A launch's record (stats/<shard>/launch-<id>.json) with every key today's version writes."""
    return {**_LAUNCH_RECORD_ADDED, **record}


def seed_before_schema_5(config: dict[str, Any], row: dict[str, Any]) -> int | None:
    """The seed an output row's request used, for a part written before rows recorded it (output schema 5):
    sample_seed of the set-up that generated the row. That is the run's own (``config``, its run record's), except in
    spec=auto runs, whose phases drew the seeds of the candidate each ran: the row's ``method`` and
    ``num_speculative_tokens`` name it (so their spec=none rows had the spec=none baseline's seeds).

    Parts from before each sample was a request of its own drew every request from sampling.seed itself; speculative
    runs then sampled one completion per prompt (sampling.n > 1 was spec=none's alone), too few for a distribution
    check to pair them, so the derivation does not tell those apart."""
    spec = config["spec"]
    if spec["method"] == "auto":
        setup = spec_label(row["method"], row["num_speculative_tokens"])
    else:
        setup = spec_label(spec["method"], spec["num_speculative_tokens"], spec["k_schedule"])
    return sample_seed(config["sampling"]["seed"], setup, row["row_id"], row["sample_index"])
