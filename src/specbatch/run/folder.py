"""The run folder: every path of a run and of its shards, and every read of them (docs/outputs.md).

The run folder is deterministic: ``<output_root>/runs/<dataset>/<model>/<spec>[-k<k>]-<hash>/``, where the hash
covers everything that changes outputs or timings, so a rerun of the same set-up finds its own folder and two
different set-ups never share one. Inside it (``<shard>`` is ``shard-<index>-of-<count>``, zero-padded):

- ``run.json``, ``config.yaml``: the run record (config, shard count, source rows), fixed by the first launch;
- ``data/<shard>/part-<n>.parquet``: the shard's output rows, one part per chunk;
- ``stats/<shard>/``: the shard's own records: ``part-<n>.json`` (a part's figures and checksum), ``launch-<id>.json``
  (one launch's streaming loop) and ``source.json`` (digests of the source rows per chunk);
- ``stats/<shard>.json``: the shard summary, written when the shard finishes;
- ``locks/<shard>.lock``, ``done/<shard>``: the writer's lock and the done marker (written last);
- ``mlflow_active/<shard>.json``, ``mlflow_pending/<shard>.json``: the MLflow run of the writing process (left behind
  only by a killed one), and the pending note of a shard whose MLflow logging failed;
- ``merged/``: the manifest and summary of the merged run;
- ``decision.json``, ``stats/<shard>/auto-pilot.json`` and ``stats/<shard>/auto-plan.json``: spec=auto's choice (one
  per run), each shard's pilot set-up and its plan.

Each record is read and written through its owner in :mod:`specbatch.run.records` (its version, and what older
versions wrote); this class only knows where each one is. The records that readers other than the MLflow observer rely
on (run.json, a shard's source record and launch records, the decision, the plan) are checked as they are read: one
that is cut short, is not a JSON object, lacks a key its readers index, or comes from a newer version raises
RecordError, whose one line names the file, what is wrong and what to do; so does a run.json whose config is not
the one the folder's name carries the digest of (edited by hand).
"""

from __future__ import annotations

import errno
import logging
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specbatch.common.atomic_files import atomic_write_text, temporaries_in
from specbatch.common.name_lengths import describe_name, overlong_name
from specbatch.config import JobConfig, run_folder_digest
from specbatch.run.records import decision_file, part_stats, run_json, source_record, summary_file, tracking_notes
from specbatch.run.records.launch_record import read_launch_record
from specbatch.run.records.profile_file import PROFILE_FILE
from specbatch.run.summary import Summary

log = logging.getLogger(__name__)

# The run record: a folder holding it is a run folder.
RUN_RECORD = run_json.RUN_RECORD


def _safe(part: str) -> str:
    """A folder-name-safe version of a readable name (hub ids contain '/')."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", part).strip("_") or "unnamed"


@dataclass(frozen=True)
class RunFolder:
    """Paths of one run (all shards) and of one shard inside it, and the reads and small writes of its records."""

    root: Path
    shard_index: int = 0
    shard_count: int = 1

    @classmethod
    def for_job(cls, job: JobConfig, shard_index: int = 0, shard_count: int = 1) -> RunFolder:
        readable = job.run_name or job.spec.label
        root = (
            Path(job.output_root).resolve()
            / "runs"
            / _safe(job.dataset.name)
            / _safe(job.model.name)
            / f"{_safe(readable)}{run_json.name_suffix(run_folder_digest(job), job.repeat)}"
        )
        return cls(root=root, shard_index=shard_index, shard_count=shard_count)

    @staticmethod
    def describe_os_error(exc: OSError) -> str:
        """The line a job stops with on an OS error while writing its run folder: a name too long for its file
        system (the run folder's own are checked before the model loads; this is for the rest) with how to shorten
        it, anything else (a full disk, a vanished folder) with the state the shard is left in."""
        if exc.errno == errno.ENAMETOOLONG:
            path = Path(os.fsdecode(exc.filename)) if exc.filename is not None else None
            found = overlong_name(path) if path is not None else None
            name = describe_name(found[0]) if found else "a name"
            return (
                f"stopped by an OS error: {name} in {path} is longer than its file system takes ({exc.strerror}): "
                "choose a shorter output_root, or set run_name=<a shorter name> for the run folder's own name, and "
                "rerun"
            )
        return (
            f"stopped by an OS error: {exc}. Finished chunks are kept and no partial file was left; fix the cause "
            "(e.g. free disk space) and rerun the same command to finish the shard"
        )

    @property
    def shard_tag(self) -> str:
        return f"shard-{self.shard_index:05d}-of-{self.shard_count:05d}"

    # The run as a whole.

    @property
    def run_json(self) -> Path:
        return self.root / RUN_RECORD

    @property
    def config_yaml(self) -> Path:
        return self.root / "config.yaml"

    def read_config_yaml(self) -> str:
        return self.config_yaml.read_text()

    def read_run_record(self) -> dict[str, Any]:
        """The run record in today's shape, whichever version wrote it (specbatch.run.records.run_json)."""
        # A file in its place (run.json itself, a part) has no run.json below it: said as such, not as an OS error.
        record = run_json.read_run_record(self.run_json) if self.root.is_dir() else None
        if record is None:
            raise FileNotFoundError(not_a_run_folder(self.root))
        return record

    def claim_run_record(self, record: dict[str, Any]) -> bool:
        """Create run.json, stamped with the format this version writes, unless it exists (atomically: of two racing
        launches one wins); True for the winner."""
        return run_json.claim_run_record(self.run_json, record)

    def write_config_yaml(self, config: dict[str, Any]) -> None:
        run_json.write_config_yaml(self.config_yaml, config)

    @property
    def decision_path(self) -> Path:
        """spec=auto's choice (specbatch.auto), shared by every shard: the first one written wins."""
        return self.root / "decision.json"

    def read_decision(self) -> dict[str, Any] | None:
        """The run's spec=auto decision; None until a shard has written it; RecordError when it is damaged."""
        return decision_file.read_decision(self.decision_path)

    @property
    def manifest_path(self) -> Path:
        return self.root / "merged" / "manifest.json"

    @property
    def merged_summary_path(self) -> Path:
        return self.root / "merged" / "summary.json"

    # The shard's data.

    @property
    def data_dir(self) -> Path:
        return self.root / "data" / self.shard_tag

    def part_path(self, part: int) -> Path:
        return self.data_dir / f"part-{part:05d}.parquet"

    def part_numbers(self) -> list[int]:
        """Numbers of the shard's parts on disk, in order."""
        return sorted(int(p.stem.removeprefix("part-")) for p in self.data_dir.glob("part-*.parquet"))

    def parts(self) -> list[Path]:
        """The shard's parts on disk, in order (never a writer's temporary file)."""
        return [self.part_path(number) for number in self.part_numbers()]

    def drop_part(self, part: int) -> None:
        """Remove a part and its figures (to generate it again)."""
        self.part_path(part).unlink(missing_ok=True)
        self.part_stats_path(part).unlink(missing_ok=True)

    # The shard's records.

    @property
    def stats_dir(self) -> Path:
        """The shard's own records: each part's figures, each launch's loop, the digests of its source rows."""
        return self.root / "stats" / self.shard_tag

    def part_stats_path(self, part: int) -> Path:
        """One chunk's figures, its launch and the part's checksum, written just before its part (the part is the
        commit)."""
        return self.stats_dir / f"part-{part:05d}.json"

    def read_part_stats(self, part: int) -> dict[str, Any]:
        return part_stats.read_part_stats(self.part_stats_path(part))

    def part_setups(self) -> list[str | None]:
        """The set-up that generated each part on disk, as its stats name it (spec=auto's phases), in part order;
        None for the run's own set-up, and for a part without stats."""
        setups = []
        for number in self.part_numbers():
            try:
                setups.append(self.read_part_stats(number).get("setup"))
            except FileNotFoundError:
                setups.append(None)
        return setups

    def write_part_stats(self, part: int, stats: dict[str, Any]) -> None:
        part_stats.write_part_stats(self.part_stats_path(part), stats)

    def launch_record_path(self, launch: str) -> Path:
        """One launch's streaming loop: the parts it wrote, its wall time and engine counter differences."""
        return self.stats_dir / f"launch-{launch}.json"

    def read_launch_record(self, launch: str | None) -> dict[str, Any] | None:
        """A launch's record of its loop; None for a killed launch, or for parts whose stats name no launch
        (specbatch.run.records.part_stats)."""
        if not launch:
            return None
        return read_launch_record(self.launch_record_path(launch))

    @property
    def source_record_path(self) -> Path:
        """Digests of the shard's source rows per chunk, written when the shard starts (resume checks them)."""
        return self.stats_dir / "source.json"

    def read_source_record(self) -> dict[str, Any] | None:
        return source_record.read_source_record(self.source_record_path)

    def write_source_record(self, digests: list[str]) -> None:
        source_record.write_source_record(self.source_record_path, digests)

    @property
    def auto_plan_path(self) -> Path:
        """spec=auto: the shard's prediction and which set-up measures which slice, fixed once the pilot is in."""
        return self.stats_dir / "auto-plan.json"

    def read_auto_plan(self) -> dict[str, Any] | None:
        """The shard's spec=auto plan; None until its pilot is in; RecordError when it is damaged."""
        return decision_file.read_plan(self.auto_plan_path)

    @property
    def auto_switch_path(self) -> Path:
        """spec=auto: the shard's switch back to spec=none, when its check found the winner slower."""
        return self.stats_dir / "auto-switch.json"

    def read_auto_switch(self) -> dict[str, Any] | None:
        return decision_file.read_switch(self.auto_switch_path)

    @property
    def auto_pilot_path(self) -> Path:
        """spec=auto: the set-up the shard pilots on, fixed before its pilot runs."""
        return self.stats_dir / "auto-pilot.json"

    def read_auto_pilot(self) -> dict[str, Any] | None:
        return decision_file.read_pilot(self.auto_pilot_path)

    @property
    def auto_revised_path(self) -> Path:
        """spec=auto: the shard's choice revised from more of its rows, when its prediction changed."""
        return self.stats_dir / "auto-revised.json"

    def read_auto_revised(self) -> dict[str, Any] | None:
        return decision_file.read_revised(self.auto_revised_path)

    @property
    def steps_dir(self) -> Path:
        """The shard's step timing, one file per stream (specbatch.run.step_log)."""
        return self.stats_dir / "steps"

    def check_records(self) -> None:
        """Read the records a resumed shard reads before it generates, besides its parts and their stats: the digests
        of its source rows, spec=auto's decision, pilot, plan, revision and switch (absent for other runs).
        RecordError when one is damaged."""
        self.read_source_record()
        self.read_decision()
        self.read_auto_pilot()
        self.read_auto_plan()
        self.read_auto_revised()
        self.read_auto_switch()

    @property
    def stats_path(self) -> Path:
        """The shard summary."""
        return self.root / "stats" / f"{self.shard_tag}.json"

    @property
    def profile_path(self) -> Path:
        """The shard's speculation profile (specbatch.run.speculation_profile), among its own records."""
        return self.stats_dir / PROFILE_FILE

    @property
    def merged_profile_path(self) -> Path:
        return self.root / "merged" / PROFILE_FILE

    def write_summary(self, summary: Summary) -> None:
        summary_file.write_summary(self.stats_path, summary)

    def read_summary(self) -> Summary:
        return summary_file.read_summary(self.stats_path)

    def summary_problem(self) -> str | None:
        """What is wrong with the shard summary file (missing, half-written, not a summary), or None."""
        return summary_file.summary_problem(self.stats_path, self.root)

    def remove_stale_temporaries(self) -> None:
        """Temporary files of a killed writer: never data (readers only take part-*.parquet); call under the lock."""
        for folder in (self.data_dir, self.stats_dir, self.steps_dir):
            for tmp in temporaries_in(folder):
                log.info("removing the temporary file of an interrupted writer: %s", tmp)
                tmp.unlink(missing_ok=True)

    # The shard's lock and markers.

    @property
    def lock_path(self) -> Path:
        return self.root / "locks" / f"{self.shard_tag}.lock"

    @property
    def done_marker(self) -> Path:
        return self.root / "done" / self.shard_tag

    def is_done(self) -> bool:
        return self.done_marker.exists()

    def mark_done(self) -> None:
        """Written last: its presence promises every part of the shard is complete."""
        atomic_write_text(self.done_marker, time.strftime("%Y-%m-%dT%H:%M:%S%z") + "\n")

    def unmark_done(self) -> None:
        self.done_marker.unlink(missing_ok=True)

    @property
    def mlflow_active_path(self) -> Path:
        """The MLflow run of the process writing the shard; left behind only by a killed process."""
        return self.root / "mlflow_active" / f"{self.shard_tag}.json"

    def read_active_run(self) -> dict[str, Any] | None:
        return tracking_notes.read_note(self.mlflow_active_path)

    @property
    def mlflow_pending_path(self) -> Path:
        """Present while the shard's MLflow logging failed and waits for jobs/log_run.py."""
        return self.root / "mlflow_pending" / f"{self.shard_tag}.json"

    def read_pending_note(self) -> dict[str, Any] | None:
        return tracking_notes.read_note(self.mlflow_pending_path)


def is_run_folder(path: Path) -> bool:
    """Whether ``path`` is a run folder (it has a run record)."""
    return (Path(path) / RUN_RECORD).is_file()


def not_a_run_folder(path: Path) -> str:
    """The one line refusing ``path`` where a run folder is asked for: a file of a run folder (its run.json, a part)
    names the folder to pass instead."""
    path = Path(path)
    if not path.is_file():
        return f"{path} is not a run folder (no run.json): pass outputs/runs/<dataset>/<model>/<run>"
    holder = next((folder for folder in path.parents if is_run_folder(folder)), None)
    if holder is None:
        return f"{path} is a file, not a run folder: pass outputs/runs/<dataset>/<model>/<run>"
    return f"{path} is a file of the run folder {holder}, not the folder: pass the folder, {holder}"


def run_folders_below(path: Path) -> list[Path]:
    """Every run folder at or below ``path`` (e.g. outputs/runs), sorted."""
    return sorted(record.parent for record in Path(path).glob(f"**/{RUN_RECORD}"))


def read_run(root: Path) -> dict[str, Any]:
    """The run record (run.json) of an existing run folder."""
    return RunFolder(Path(root)).read_run_record()


def shard_folders(root: Path) -> list[RunFolder]:
    """Every shard of an existing run, by the shard count its run record fixed."""
    count = read_run(root)["shard_count"]
    return [RunFolder(Path(root).resolve(), index, count) for index in range(count)]
