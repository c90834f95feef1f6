"""A shard's resume plan: what its run folder says is done and what is to do, asked in one place.

The shard executor asks :func:`look` before anything else ("is the shard complete, are its parts whole, are its
summary and speculation profile readable?") and again under the shard's lock; once it holds the lock,
:func:`settle` clears what a killed earlier launch left (its temporary files, damaged parts, a done marker they no
longer stand behind), refuses to resume over changed source rows (recording them on the shard's first start), and
says which chunks are finished and which are to generate. The run record's checks (:func:`check_run_record`,
:func:`claim_run_record`) and the shard's results (:func:`write_results`) are here too, so that the executor walks
the shard's steps and never the folder.

Every record is read and written through its owner in :mod:`specbatch.run.records`; this module only decides.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specbatch.config import ConfigError
from specbatch.run.events import RunStart
from specbatch.run.folder import RunFolder
from specbatch.run.integrity import damaged_parts, describe_damage
from specbatch.run.records.profile_file import write_profile
from specbatch.run.records.source_record import changed_chunks, unrecorded_with_parts
from specbatch.run.speculation_profile import profile_problem, speculation_profile
from specbatch.run.summary import Summary

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ResumePlan:
    """What a shard's folder says: done or not, which parts are damaged, and (once settled) what is to do."""

    folder: RunFolder
    # The done marker is there (it is written last, when every part was in).
    marked_done: bool
    # Part number -> what is wrong with it: the parts to generate again.
    damaged: dict[int, str] = field(default_factory=dict)
    # For a complete shard: what is wrong with its summary file (missing, half-written), or None.
    summary_problem: str | None = None
    # For a complete shard with a whole summary: what is wrong with its speculation profile (damaged, or missing
    # where its rows make one), or None.
    profile_problem: str | None = None
    # Once settled: chunks whose parts are on disk and whole, chunks to generate, and every chunk's part.
    finished: list[int] = field(default_factory=list)
    todo: list[int] = field(default_factory=list)
    parts: list[Path] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Done and whole: nothing to generate."""
        return self.marked_done and not self.damaged

    def describe_damage(self) -> str:
        return describe_damage(self.folder, self.damaged)

    def finished_parts(self) -> list[Path]:
        """The parts on disk of a complete shard, in order."""
        return self.folder.parts()

    def read_summary(self) -> Summary:
        return self.folder.read_summary()


def look(folder: RunFolder, config: dict[str, Any]) -> ResumePlan:
    """The shard as its folder is now: a done one is checked whole (every part it recorded, its summary and its
    speculation profile, which the run's ``config`` says whether to expect)."""
    if not folder.is_done():
        return ResumePlan(folder, marked_done=False)
    damaged = damaged_parts(folder)
    problem = None if damaged else folder.summary_problem()
    profile = None if damaged or problem else profile_problem(folder, config)
    return ResumePlan(folder, marked_done=True, damaged=damaged, summary_problem=problem, profile_problem=profile)


def check_run_record(folder: RunFolder) -> None:
    """Before the steps start: a run's shard count is fixed by its first launch (another count would cut rows
    differently), and a damaged record the shard reads (source digests, spec=auto's decision or plan) is refused
    in one line now."""
    if folder.run_json.exists():
        _refuse_other_count(folder, folder.read_run_record())
    folder.check_records()


def _refuse_other_count(folder: RunFolder, record: dict[str, Any]) -> None:
    recorded = record["shard_count"]
    if recorded != folder.shard_count:
        raise ConfigError(
            f"this run was started with shard.count={recorded}; relaunching it with shard.count="
            f"{folder.shard_count} would cut the rows differently and duplicate or lose some. Relaunch with "
            f"shard.count={recorded}, or start a new run with run_name=..."
        )


def claim_run_record(start: RunStart, source_name: str) -> None:
    """run.json fixes the run's shard count and row count; the first launch's record wins, atomically.

    Two launches racing with different shard counts both find no run.json at their first look; only one of them
    can create it, and the other is refused here, before it writes anything. ``source_name`` names the data in the
    refusal of changed rows (e.g. ``dataset.path=<file>``).
    """
    folder, config, source_rows = start.folder, start.config, start.source_rows
    record = {
        "config": config,
        "shard_count": folder.shard_count,
        "source_rows": source_rows,
        "created_with": start.runtime,
    }
    if folder.claim_run_record(record):
        folder.write_config_yaml(config)
        return
    recorded = folder.read_run_record()
    _refuse_other_count(folder, recorded)
    before = recorded.get("source_rows")
    if before is not None and before != source_rows:
        raise ConfigError(
            f"{source_name} now gives {source_rows} rows, but this run started with {before}: the shards "
            "would cut the rows differently and repeat or lose some. Restore the data as it was to finish this run, "
            f"or start a new run of the new data with run_name=<new name> (this run stays in {folder.root})"
        )
    if not folder.config_yaml.exists():
        folder.write_config_yaml(config)


def settle(folder: RunFolder, chunks: int, digests: list[str], source_name: str) -> ResumePlan:
    """Under the shard's lock: clear a killed launch's leftovers, refuse changed source rows, drop damaged parts;
    the plan of what is finished and what is to generate of ``chunks`` chunks (``digests``: their source rows')."""
    folder.remove_stale_temporaries()
    _check_source(folder, digests, source_name)
    damaged = damaged_parts(folder, folder.part_numbers())
    if damaged:
        log.warning("damaged parts are regenerated: %s", describe_damage(folder, damaged))
        # The shard is no longer complete until they are written again; a part that is not as it was written is
        # regenerated: it and its stats are the job's own files.
        folder.unmark_done()
        for number in damaged:
            folder.drop_part(number)
    parts = [folder.part_path(n) for n in range(chunks)]
    finished = [n for n, part in enumerate(parts) if part.exists()]
    todo = [n for n in range(chunks) if n not in set(finished)]
    return ResumePlan(folder, folder.is_done(), damaged, finished=finished, todo=todo, parts=parts)


def _check_source(folder: RunFolder, digests: list[str], source_name: str) -> None:
    """Refuse to resume over source rows that changed since the shard started; record them on its first start."""
    recorded = folder.read_source_record()
    has_parts = bool(folder.part_numbers())
    if recorded is not None and has_parts:
        changed = changed_chunks(recorded, digests)
        if changed:
            first = changed[0]
            raise ConfigError(
                f"{source_name} changed since shard {folder.shard_index}/{folder.shard_count} of this run "
                f"started: the rows of chunk {first} (and {len(changed) - 1} more chunk(s)) are not what they were, "
                "so resuming would mix two versions of the data (rows twice, rows missing). Restore the file as it "
                f"was to finish this run, or start a new run of the new data with run_name=<new name> (the finished "
                f"parts stay in {folder.root})"
            )
        return
    if unrecorded_with_parts(recorded, has_parts):
        log.info("shard %s has parts but no source record; recording the source as it is now", folder.shard_tag)
    folder.write_source_record(digests)


def write_results(folder: RunFolder, summary: Summary, parts: list[Path], config: dict[str, Any]) -> None:
    """The shard summary and the shard's speculation profile among its records (none for spec=none, without
    per-row figures, or when the summary refused them: an earlier one is removed, which the summary no longer
    stands behind)."""
    folder.write_summary(summary)
    write_profile(folder.profile_path, speculation_profile(parts, config, summary, folder.part_setups()))
