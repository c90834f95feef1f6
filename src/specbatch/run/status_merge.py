"""Whole-run views over a run folder: which shards are done, and the merge of finished shards into one result.

A run folder knows its shard count (run.json). A shard is done when its marker exists, running while a live
process holds its lock, partial when it has parts but neither, missing otherwise; damaged when one of its parts is
not as it was written (truncated, corrupted, missing), whatever its marker says, when a done shard's summary cannot
be read, or when a record the shard reads cannot be (spec=auto's decision, shared by every shard, or its own plan). A
done shard whose speculation profile is damaged or missing stays done (its rows are whole): status says so in one
line, and merge writes it again from the rows first.
Merging refuses until every shard is done, then writes a manifest over all parts and one summary added up from the
shards' counts.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from specbatch.run.folder import RunFolder, read_run, shard_folders
from specbatch.run.integrity import damaged_parts, describe_damage
from specbatch.run.locks import is_locked
from specbatch.run.records.manifest_file import write_manifest
from specbatch.run.records.profile_file import REBUILD, write_profile
from specbatch.run.records.record_files import RecordError
from specbatch.run.records.summary_file import write_summary
from specbatch.run.speculation_profile import profile_problem, rebuild_profile, speculation_profile
from specbatch.run.summary import Summary, merge_summaries
from specbatch.run.summary_table import format_table

log = logging.getLogger(__name__)


class RunIncompleteError(RuntimeError):
    """Some shards are not done; the message lists them and how to finish them."""


@dataclass(frozen=True)
class ShardState:
    index: int
    # done | running | partial | missing | damaged
    state: str
    parts: int
    # For a damaged shard: which parts or records and what is wrong with them.
    problem: str | None = None
    # What to do about ``problem`` when rerunning the shard is not it (a damaged record says its own way out).
    fix: str | None = None

    @property
    def why(self) -> str:
        """Why the shard is not done, with what to do when that is not to rerun it."""
        return f"{self.problem}: {self.fix}" if self.fix else self.problem or self.state


def run_status(root: Path) -> list[ShardState]:
    states = []
    config = read_run(root)["config"]
    for folder in shard_folders(root):
        on_disk = folder.part_numbers()
        parts = len(on_disk)
        if is_locked(folder.lock_path):
            states.append(ShardState(folder.shard_index, "running", parts))
            continue
        # The records a resume reads: damaged, the shard cannot go on (nor can a done one be checked whole).
        try:
            folder.check_records()
        except RecordError as exc:
            states.append(ShardState(folder.shard_index, "damaged", parts, exc.problem, exc.fix))
            continue
        # A done shard must have every part it recorded; an unfinished one only its finished parts intact.
        damaged = damaged_parts(folder, None if folder.is_done() else on_disk)
        if damaged:
            problem = describe_damage(folder, damaged)
            states.append(ShardState(folder.shard_index, "damaged", parts, problem))
            continue
        # A done shard whose summary is gone or half-written: its rows are whole, its figures are not readable.
        summary_problem = folder.summary_problem() if folder.is_done() else None
        if summary_problem:
            states.append(ShardState(folder.shard_index, "damaged", parts, summary_problem))
            continue
        if folder.is_done():
            # Its rows and summary are whole: it stays done, and what is wrong with its profile is said apart.
            profile = profile_problem(folder, config)
            states.append(ShardState(folder.shard_index, "done", parts, profile, REBUILD if profile else None))
            continue
        states.append(ShardState(folder.shard_index, "partial" if parts else "missing", parts))
    return states


def format_status(root: Path, states: list[ShardState]) -> str:
    counts = {s: sum(x.state == s for x in states) for s in ("done", "running", "partial", "missing", "damaged")}
    lines = [f"{root}", "  " + ", ".join(f"{n} {s}" for s, n in counts.items() if n or s != "damaged")]
    lines[-1] += f" of {len(states)} shards"
    said = set()
    for s in states:
        if s.state != "done":
            lines.append(f"  shard {s.index:>5}: {s.state:<8} {s.parts} part(s)")
        if s.problem:
            # A record every shard reads (spec=auto's decision) is named once.
            line = f"{s.problem}: {s.fix or 'rerun the shard to regenerate it'}"
            lines.append(f"      {line if line not in said else 'as above'}")
            said.add(line)
    return "\n".join(lines)


@dataclass(frozen=True)
class MergeResult:
    summary: Summary
    manifest: Path
    summary_path: Path
    parts: list[Path]


def finished_summary(root: Path) -> Summary:
    """The run's summary over all its shards, added up from their counts; refuses while a shard is unfinished."""
    root = Path(root).resolve()
    states = run_status(root)
    unfinished = [s for s in states if s.state != "done"]
    if unfinished:
        # Shards not done for the same reason are listed together (a damaged decision is every shard's).
        by_why: dict[str, list[str]] = {}
        for s in unfinished:
            by_why.setdefault(s.why, []).append(str(s.index))
        listed = ", ".join(f"{', '.join(shards)} ({why})" for why, shards in by_why.items())
        rerun = ""
        if any(not s.fix for s in unfinished):
            rerun = f" Finish them (rerun with shard.index=<i> shard.count={len(states)}; finished chunks are kept)"
            rerun += " and try again."
        raise RunIncompleteError(f"{root}: {len(unfinished)} of {len(states)} shards are not done: {listed}.{rerun}")
    return merge_summaries([folder.read_summary() for folder in shard_folders(root)])


def merge_shards(root: Path) -> MergeResult:
    """Check every shard is done, then write merged/manifest.json and merged/summary.json."""
    root = Path(root).resolve()
    merged = finished_summary(root)
    shards = shard_folders(root)
    parts = [part for folder in shards for part in folder.parts()]
    config = read_run(root)["config"]
    for folder in shards:
        problem = profile_problem(folder, config)
        if problem:
            log.warning("shard %s: %s: its speculation profile is rebuilt from the rows", folder.shard_tag, problem)
            rebuild_profile(folder, config)
    run = RunFolder(root)
    manifest, summary_path = run.manifest_path, run.merged_summary_path
    write_manifest(manifest, root, len(shards), merged.rows, parts)
    write_summary(summary_path, merged)
    # None removes one an earlier merge wrote, which stands for no figures of this one.
    setups = [setup for folder in shards for setup in folder.part_setups()]
    write_profile(run.merged_profile_path, speculation_profile(parts, config, merged, setups))
    log.info("merged %d shards of %s: %d rows in %d parts", len(shards), root, merged.rows, len(parts))
    log.info("merged summary\n%s", format_table(merged))
    return MergeResult(merged, manifest, summary_path, parts)
