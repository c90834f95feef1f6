"""Check a finished sampled run: the referee scores every sample's tokens with the run's own target and sampler,
and the verdict (specbatch.analysis.lossless.evidence) is written to ``RUN/lossless/lossless.json``. No baseline run
is needed: the target itself is the reference.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from specbatch.analysis.lossless.referee import Referee
from specbatch.analysis.lossless.sampler import Sampler
from specbatch.common.atomic_files import atomic_write_text
from specbatch.common.machine import this_machine
from specbatch.config.schema import SamplingConfig
from specbatch.run.folder import read_run, shard_folders
from specbatch.run.output_rows import STATUS_OK
from specbatch.run.status_merge import finished_summary

log = logging.getLogger(__name__)

COLUMNS = ["row_id", "turn", "sample_index", "status", "prompt_token_ids", "completion_token_ids"]


def result_path(root: Path) -> Path:
    return Path(root) / "lossless" / "lossless.json"


def sampled_rows(root: Path) -> Iterator[dict[str, Any]]:
    """Every generated sample of the run (all shards, all turns), with the prompt token ids the engine saw."""
    for folder in shard_folders(Path(root)):
        for part in folder.parts():
            for row in pq.read_table(part, columns=COLUMNS).to_pylist():
                if row["status"] == STATUS_OK:
                    yield row


def run_sampler(config: dict[str, Any]) -> Sampler:
    """The run's sampler from its recorded config (ConfigError for a greedy run)."""
    recorded = config["sampling"]
    return Sampler.of(
        SamplingConfig(temperature=recorded["temperature"], top_p=recorded["top_p"], top_k=recorded["top_k"])
    )


def check_run(root: Path) -> dict[str, Any]:
    """The run's verdict, written to result_path(root) (replacing an earlier check's) and returned."""
    root = Path(root).resolve()
    finished_summary(root)  # RunIncompleteError for a run that is not finished: its rows are not all there
    config = read_run(root)["config"]
    sampler = run_sampler(config)
    model = config["model"]
    referee = Referee(model["path"], model.get("revision"))
    verdict = referee.score(sampled_rows(root), sampler).verdict()
    record = {
        "verdict": verdict.verdict,
        "why": verdict.why,
        "figures": verdict.figures,
        "sampler": asdict(sampler),
        "referee": {
            "model": model["path"],
            "dtype": "float32",
            "library": "transformers",
            "samples": referee.last.samples,
            "tokens": referee.last.tokens,
            "seconds": referee.last.seconds,
        },
        "machine": this_machine().line(),
    }
    path = result_path(root)
    path.parent.mkdir(exist_ok=True)
    atomic_write_text(path, json.dumps(record, indent=1, sort_keys=True) + "\n")
    log.info("lossless check of %s: %s (%s); written to %s", root, verdict.verdict, verdict.why, path)
    return record
