"""A finished run as the comparison reads it: its config, its summary over all shards, its completions' token ids,
and the workload key that says which runs may be compared (same prompts, model, dtype, sampling and engine).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specbatch.common.machine import machine_line
from specbatch.config import workload_digest
from specbatch.config.engine import backend_keys
from specbatch.engine import recorded_backend
from specbatch.methods import simulated, variant_caption
from specbatch.run.folder import RunFolder, read_run, shard_folders
from specbatch.run.output_rows import STATUS_OK
from specbatch.run.records.output_parts import rows_with_seeds
from specbatch.run.records.summary_file import batch_caps
from specbatch.run.status_merge import finished_summary
from specbatch.run.summary import Summary

RowKey = tuple[str, int, int]


@dataclass
class RunData:
    """One finished run: its config, its summary over all shards, and its completions' token ids."""

    root: Path
    config: dict[str, Any]
    summary: Summary
    tokens: dict[RowKey, list[int]]
    # First-turn requests: the rows' first turns, each sample its own request (sampling.n per row).
    prompts: int
    # What the run measured, byte for byte (its run.json and shard summaries): a copied run folder has the same, a
    # repeat never does (its repeat number and timings differ). Empty: unknown.
    measurement: str = ""
    # The seed of each completion of ``tokens`` (its request's; None: drawn from the engine's own random state):
    # samples of two runs that share one are not independent (analysis.distribution).
    seeds: dict[RowKey, int | None] = field(default_factory=dict)
    # spec=auto: the run's decision (decision.json); None for a fixed set-up, or a run that has none.
    decision: dict[str, Any] | None = None

    @property
    def method(self) -> str:
        return self.summary.method

    @property
    def k(self) -> int | None:
        return self.summary.num_speculative_tokens

    @property
    def chose(self) -> str | None:
        """spec=auto: the set-up its decision chose, e.g. ``ngram k=5`` (None for a fixed set-up, or no decision)."""
        if self.method != "auto" or self.decision is None:
            return None
        return str(self.decision["winner_caption"])

    @property
    def k_schedule(self) -> list[list[int]] | None:
        """The run's k per batch size (spec.k_schedule), or None for one k."""
        return self.config["spec"]["k_schedule"]

    @property
    def variant(self) -> str | None:
        """How it verifies or drafts other than vLLM's defaults (e.g. ``block verification``), or None."""
        return variant_caption(self.config["spec"])

    @property
    def simulated(self) -> bool:
        """Whether it ran at a given acceptance (methods.Method.simulated): its text is not a real output, so it is
        never checked against the baseline's tokens or distribution."""
        return simulated(self.method)

    @property
    def repeat(self) -> int:
        return int(self.config["repeat"])

    @property
    def batch_size(self) -> int:
        """Requests the engine ran at once: its concurrency (engine.max_num_seqs or the engine's default), or fewer
        when the run had fewer prompts. A summary without concurrency is of a run whose batch was its chunk
        (specbatch.run.records.summary_file.batch_caps)."""
        return max(1, min([self.prompts, *batch_caps(self.summary, self.config)]))

    @property
    def engine(self) -> str:
        """engine.backend."""
        return recorded_backend(self.config).name

    @property
    def dtype(self) -> str:
        """The weights as the run's backend labels them (Engine.weights_label): model.dtype, or gguf on llama.cpp."""
        return recorded_backend(self.config).weights_label(self.config)

    @property
    def machines(self) -> list[str]:
        """The line of each machine that generated the run (several when its shards ran on different ones); empty
        when its summary recorded none."""
        machine = self.summary.machine
        if not machine:
            return []
        return list(machine.get("mixed") or [machine_line(machine)])

    @property
    def prompts_key(self) -> str:
        """The workload without its engine and weights: runs on different engines with the same key generated the
        same prompts with the same model and sampling (the cross-engine table lines them up)."""
        return prompts_digest(self.config)

    @property
    def workload(self) -> str:
        """What must match for two runs to be compared: same prompts, model, dtype, sampling and engine."""
        return workload(self.config)


def prompts_digest(config: dict[str, Any]) -> str:
    plain = {key: value for key, value in config.items() if key != "engine"}
    # The weights: model.dtype, and the weights' files backends name under model (llama.cpp's model.gguf).
    weights = {"dtype", *backend_keys("model")}
    plain["model"] = {key: value for key, value in config["model"].items() if key not in weights}
    return workload_digest(plain)


def workload(config: dict[str, Any]) -> str:
    """The run's workload key: the config fields that declare Identity.workload (specbatch.config.identity)."""
    return workload_digest(config)


def load_run(root: Path) -> RunData:
    root = Path(root).resolve()
    config = read_run(root)["config"]
    summary = finished_summary(root)
    tokens: dict[RowKey, list[int]] = {}
    seeds: dict[RowKey, int | None] = {}
    first_turn_rows: set[tuple[str, int]] = set()
    columns = ["row_id", "turn", "sample_index", "status", "completion_token_ids", "method", "num_speculative_tokens"]
    for folder in shard_folders(root):
        for part in folder.parts():
            for row in rows_with_seeds(part, columns, config):
                if row["turn"] == 1:
                    # Each sample is a request of its own: n samples of one row fill n places in the batch.
                    first_turn_rows.add((row["row_id"], row["sample_index"]))
                if row["status"] == STATUS_OK:
                    key = (row["row_id"], row["turn"], row["sample_index"])
                    tokens[key] = row["completion_token_ids"]
                    seeds[key] = row["seed"]
    prompts, decision = len(first_turn_rows), RunFolder(root).read_decision()
    return RunData(
        root, config, summary, tokens, prompts, measurement=_measurement(root), seeds=seeds, decision=decision
    )


def _measurement(root: Path) -> str:
    digest = hashlib.sha256((root / "run.json").read_bytes())
    for stats in sorted((root / "stats").glob("*.json")):
        digest.update(stats.name.encode() + stats.read_bytes())
    return digest.hexdigest()
