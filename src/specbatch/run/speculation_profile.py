"""The acceptance profile of a speculative run, ``speculation_profile.json``, from its output rows: method, k, rows,
engine, AL, draft acceptance rate and per-position conditional and marginal acceptance, overall and per category,
with ``synthetic_acceptance_rates`` as vLLM's synthetic rejection sampler takes them (so a simulator, or a Dynamo
mocker, can replay this run's acceptance). Like NVIDIA ModelOpt's speculation_profile.json, from real runs.

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

from specbatch.engine.spec_metrics import acceptance_profile, accepted_per_position_from_histogram
from specbatch.run.output_rows import STATUS_OK
from specbatch.run.records.profile_file import PROFILE_FILE
from specbatch.run.summary import Summary

log = logging.getLogger(__name__)

_COLUMNS = ["row_id", "category", "status", "spec_steps", "draft_tokens", "acceptance_histogram"]
# The category name of the figures over every row.
OVERALL = "(all)"


class _Sums:
    """Drafting figures of some rows, added up: positions 0..k-1 (a schedule's smaller k leave the rest at 0)."""

    def __init__(self, k: int) -> None:
        self.drafts = self.draft_tokens = 0
        self.per_position = [0] * k
        self.rows: set[str] = set()

    def add(self, row: dict[str, Any]) -> None:
        self.drafts += row["spec_steps"]
        self.draft_tokens += row["draft_tokens"] or 0
        for position, count in enumerate(accepted_per_position_from_histogram(row["acceptance_histogram"])):
            self.per_position[position] += count
        self.rows.add(row["row_id"])


def speculation_profile(parts: list[Path], config: dict[str, Any], summary: Summary) -> dict[str, Any] | None:
    """The profile of the rows in ``parts`` of a run with ``config`` (its recorded, plain config), whose summary is
    ``summary``; None when the run did not speculate, its rows carry no per-request figures, or the summary refused
    their figures (logged with its reason)."""
    k = config["spec"].get("num_speculative_tokens")
    if config["spec"]["method"] == "none" or not k:
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

    def profile(s: _Sums) -> dict[str, Any]:
        return {"rows": len(s.rows), **acceptance_profile(s.drafts, s.draft_tokens, s.per_position, k)}

    overall = profile(sums[OVERALL])
    return {
        "method": config["spec"]["method"],
        "k": k,
        "engine": config["engine"]["backend"],
        "model": config["model"]["path"],
        **overall,
        "synthetic_acceptance_rates": overall["marginal_acceptance"],
        "categories": {name: profile(s) for name, s in sorted(sums.items()) if name != OVERALL},
    }
