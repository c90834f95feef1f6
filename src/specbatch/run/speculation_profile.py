"""The acceptance profile of a speculative run, ``speculation_profile.json``, from its output rows, in NVIDIA
ModelOpt's speculation profile schema 1.0 (specbatch.run.profile_schema): the acceptance-length histogram, AL, the
conditional and marginal acceptance per position, overall and per category, what was measured (method, k, target,
draft checkpoint) and under what conditions (engine, data set, sampling, batch, machine), checked, and marked
``measured``. Dynamo's mocker, aiconfigurator and ModelOpt read it as theirs; its marginal rates are what vLLM's
synthetic rejection sampler takes (profile_schema.synthetic_acceptance_rates), so a simulator can replay this run's
acceptance.

Per shard among its own records (``stats/<shard>/speculation_profile.json``) and, once merged, for the whole run
(``merged/speculation_profile.json``). None for spec=none, for rows without per-request figures (a server's
figures are server-wide: no per-row histogram), and when the summary of the same rows refused their acceptance
figures (a server that counts more accepted than drafted tokens): the profile is built only from figures the summary
accepted, and the summary alone judges them (specbatch.run.summary)."""

from __future__ import annotations

import logging
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from specbatch.run.output_rows import STATUS_OK
from specbatch.run.profile_schema import OURS, acceptance_figures, build_profile, checkpoint_id
from specbatch.run.records.profile_file import PROFILE_FILE
from specbatch.run.summary import Summary

log = logging.getLogger(__name__)

_COLUMNS = ["row_id", "category", "status", "spec_steps", "draft_tokens", "acceptance_histogram"]
# The category name of the figures over every row.
OVERALL = "(all)"


class _Sums:
    """Drafting figures of some rows, added up: steps by tokens accepted, 0..k (a schedule's smaller k leave the
    rest at 0), draft tokens, rows, and each request's own AL."""

    def __init__(self, k: int) -> None:
        self.histogram = [0] * (k + 1)
        self.draft_tokens = 0
        self.rows: set[str] = set()
        self.request_lengths: list[float] = []

    def add(self, row: dict[str, Any]) -> None:
        histogram = row["acceptance_histogram"]
        # Kept whole if longer than k + 1, so that the profile's check sees a k below what ran.
        self.histogram += [0] * (len(histogram) - len(self.histogram))
        for j, steps in enumerate(histogram):
            self.histogram[j] += steps
        self.draft_tokens += row["draft_tokens"] or 0
        self.rows.add(row["row_id"])
        if sum(histogram):
            self.request_lengths.append(1 + sum(j * n for j, n in enumerate(histogram)) / sum(histogram))

    def ours(self) -> dict[str, Any]:
        """What the schema has no field for: rows, drafting steps, draft and accepted tokens, draft acceptance rate."""
        accepted = sum(j * n for j, n in enumerate(self.histogram))
        return {
            "rows": len(self.rows),
            "drafts": sum(self.histogram),
            "draft_tokens": self.draft_tokens,
            "accepted_tokens": accepted,
            "draft_acceptance_rate": accepted / self.draft_tokens if self.draft_tokens else 0.0,
        }


def speculation_profile(parts: list[Path], config: dict[str, Any], summary: Summary) -> dict[str, Any] | None:
    """The profile of the rows in ``parts`` of a run with ``config`` (its recorded, plain config), whose summary is
    ``summary``; None when the run did not speculate, its rows carry no per-request figures, or the summary refused
    their figures (logged with its reason)."""
    spec = config["spec"]
    k = spec.get("num_speculative_tokens")
    if spec["method"] == "none" or not k:
        return None
    refused = summary.refused_acceptance()
    if refused:
        log.warning("no %s: the summary refused the rows' acceptance figures (%s)", PROFILE_FILE, refused)
        return None
    sums: dict[str, _Sums] = defaultdict(lambda: _Sums(k))
    for part in parts:
        for row in pq.read_table(part, columns=_COLUMNS).to_pylist():
            if row["status"] != STATUS_OK or row["spec_steps"] is None or not row["acceptance_histogram"]:
                continue
            sums[OVERALL].add(row)
            if row["category"] is not None:
                sums[row["category"]].add(row)
    if OVERALL not in sums:
        return None
    overall = sums.pop(OVERALL)
    lengths = overall.request_lengths
    return build_profile(
        overall.histogram,
        k,
        method=spec["method"],
        measured=True,
        target_model=target_model(config["model"]),
        draft_checkpoint=draft_checkpoint(spec),
        per_category={
            name: {**acceptance_figures(s.histogram, k), OURS: s.ours()} for name, s in sorted(sums.items())
        },
        mean_per_request=sum(lengths) / len(lengths) if lengths else None,
        measurement_conditions=measurement_conditions(config, summary.concurrency, summary.machine),
        ours=overall.ours(),
    )


def target_model(model: dict[str, Any]) -> dict[str, Any]:
    """What ran as the target (a run record's ``model`` section)."""
    return {
        "id": checkpoint_id(model["path"]),
        "name": model.get("name"),
        "revision": model.get("revision"),
        "dtype": model.get("dtype"),
    }


def draft_checkpoint(spec: dict[str, Any]) -> dict[str, Any] | None:
    """The method's own checkpoint (a draft model, a head), None for a method that drafts without one."""
    if not spec.get("model"):
        return None
    return {"id": checkpoint_id(spec["model"]), "revision": spec.get("revision")}


def measurement_conditions(
    config: dict[str, Any], concurrency: int | None, machine: dict[str, Any] | None
) -> dict[str, Any]:
    """What the acceptance depends on besides the model and the method: the engine, the data, the sampling, the
    batch (``concurrency``) and the ``machine`` (specbatch.common.machine; shards on different machines say so)."""
    sampling = config["sampling"]
    return {
        "engine": config["engine"]["backend"],
        "dataset": config["dataset"].get("name"),
        "temperature": sampling.get("temperature"),
        "top_p": sampling.get("top_p"),
        "top_k": sampling.get("top_k"),
        "max_tokens": sampling.get("max_tokens"),
        "concurrency": concurrency,
        "machine": machine,
    }
