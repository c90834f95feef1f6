"""Where a run's files go (DESIGN.md "Output layout").

The run folder is deterministic: ``<output_root>/runs/<dataset>/<model>/<spec>[-k<k>]-<hash>/``, where the hash
covers everything that changes outputs or timings, so a rerun of the same set-up finds its own folder and two
different set-ups never share one.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from specbatch.config import JobConfig, to_plain_dict

# Sections of the config that change what is generated or how fast; tracking and output paths do not.
# chunk_size too: parts are numbered by chunk, so a resumed run must cut chunks the same way.
HASHED_KEYS = ("model", "spec", "dataset", "sampling", "engine", "max_samples", "chunk_size")


def config_hash(job: JobConfig, length: int = 8) -> str:
    plain = to_plain_dict(job)
    relevant = {key: plain[key] for key in HASHED_KEYS}
    digest = hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()
    return digest[:length]


def _safe(part: str) -> str:
    """A folder-name-safe version of a readable name (hub ids contain '/')."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", part).strip("_") or "unnamed"


@dataclass(frozen=True)
class RunLayout:
    """Paths of one run (all shards) and of one shard inside it."""

    root: Path
    shard_index: int = 0
    shard_count: int = 1

    @classmethod
    def for_job(cls, job: JobConfig, shard_index: int = 0, shard_count: int = 1) -> RunLayout:
        readable = job.run_name or job.spec.label
        root = (
            Path(job.output_root).resolve()
            / "runs"
            / _safe(job.dataset.name)
            / _safe(job.model.name)
            / f"{_safe(readable)}-{config_hash(job)}{f'-rep{job.repeat}' if job.repeat else ''}"
        )
        return cls(root=root, shard_index=shard_index, shard_count=shard_count)

    @property
    def shard_tag(self) -> str:
        return f"shard-{self.shard_index:05d}-of-{self.shard_count:05d}"

    @property
    def run_json(self) -> Path:
        return self.root / "run.json"

    @property
    def data_dir(self) -> Path:
        return self.root / "data" / self.shard_tag

    def part_path(self, part: int) -> Path:
        return self.data_dir / f"part-{part:05d}.parquet"

    def part_numbers(self) -> list[int]:
        """Numbers of the shard's parts on disk, in order."""
        return sorted(int(p.stem.removeprefix("part-")) for p in self.data_dir.glob("part-*.parquet"))

    def launch_record_path(self, launch: str) -> Path:
        """One launch's streaming loop: the parts it wrote, its wall time and engine counter differences."""
        return self.root / "stats" / self.shard_tag / f"launch-{launch}.json"

    def part_stats_path(self, part: int) -> Path:
        """One chunk's figures, its launch and the part's checksum, written just before its part (the part is the
        commit)."""
        return self.root / "stats" / self.shard_tag / f"part-{part:05d}.json"

    @property
    def lock_path(self) -> Path:
        return self.root / "locks" / f"{self.shard_tag}.lock"

    @property
    def done_marker(self) -> Path:
        return self.root / "done" / self.shard_tag

    @property
    def stats_path(self) -> Path:
        return self.root / "stats" / f"{self.shard_tag}.json"

    @property
    def source_record_path(self) -> Path:
        """Digests of the shard's source rows per chunk, written when the shard starts (resume checks them)."""
        return self.root / "stats" / self.shard_tag / "source.json"

    @property
    def mlflow_active_path(self) -> Path:
        """The MLflow run of the process writing the shard; left behind only by a killed process."""
        return self.root / "mlflow_active" / f"{self.shard_tag}.json"

    @property
    def mlflow_pending_path(self) -> Path:
        """Present while the shard's MLflow logging failed and waits for jobs/log_run.py."""
        return self.root / "mlflow_pending" / f"{self.shard_tag}.json"

    @property
    def config_yaml(self) -> Path:
        return self.root / "config.yaml"
