"""The acceptance profile of a speculative run, ``speculation_profile.json``, from its output rows: method, k, rows,
engine, AL, draft acceptance rate and per-position conditional and marginal acceptance, overall and per category,
with ``synthetic_acceptance_rates`` as vLLM's synthetic rejection sampler takes them (so a simulator, or a Dynamo
mocker, can replay this run's acceptance). Like NVIDIA ModelOpt's speculation_profile.json, from real runs.

Per shard among its own records (``stats/<shard>/speculation_profile.json``) and, once merged, for the whole run
(``merged/speculation_profile.json``). None for spec=none, for rows without per-request figures (a server's
figures are server-wide: no per-row histogram), and when the summary of the same rows refused their acceptance
figures (a server that counts more accepted than drafted tokens): the profile is built only from figures the summary
accepted, and the summary alone judges them (specbatch.run.summary).

A finished shard's profile that is damaged or missing is found (:func:`profile_problem`) and written again from the
rows (:func:`rebuild_profile`) by status, merge and a rerun (specbatch.run.status_merge, specbatch.run.executor).

A spec=auto run's profile is that of the rows its drafting set-ups generated (k: the largest they drafted), and it
names each set-up's rows, roles and figures apart (``setups``), spec=none's pilot too."""

from __future__ import annotations

import logging
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from specbatch.config import spec_label
from specbatch.engine.spec_metrics import acceptance_profile, accepted_per_position_from_histogram
from specbatch.run.folder import RunFolder
from specbatch.run.output_rows import STATUS_OK
from specbatch.run.records.profile_file import PROFILE_FILE, read_profile, write_profile
from specbatch.run.records.record_files import RecordError
from specbatch.run.summary import Summary

log = logging.getLogger(__name__)

_COLUMNS = ["row_id", "category", "status", "spec_steps", "draft_tokens", "acceptance_histogram"]
_SETUP_COLUMNS = ["method", "num_speculative_tokens"]
# The category name of the figures over every row.
OVERALL = "(all)"


class _Sums:
    """Drafting figures of some rows, added up: positions 0..k-1 (a schedule's smaller k leave the rest at 0), k the
    largest any of them drafted."""

    def __init__(self, k: int = 0) -> None:
        self.drafts = self.draft_tokens = 0
        self.per_position = [0] * k
        self.rows: set[str] = set()

    def add(self, row: dict[str, Any]) -> None:
        self.drafts += row["spec_steps"]
        self.draft_tokens += row["draft_tokens"] or 0
        accepted = accepted_per_position_from_histogram(row["acceptance_histogram"])
        self.per_position += [0] * (len(accepted) - len(self.per_position))
        for position, count in enumerate(accepted):
            self.per_position[position] += count
        self.rows.add(row["row_id"])

    def profile(self, k: int) -> dict[str, Any]:
        return {"rows": len(self.rows), **acceptance_profile(self.drafts, self.draft_tokens, self.per_position, k)}


def speculation_profile(
    parts: list[Path], config: dict[str, Any], summary: Summary, setups: list[str | None] | None = None
) -> dict[str, Any] | None:
    """The profile of the rows in ``parts`` of a run with ``config`` (its recorded, plain config), whose summary is
    ``summary``; None when the run did not speculate, its rows carry no per-request figures, or the summary refused
    their figures (logged with its reason).

    spec=auto: the figures are those of its drafting set-ups' rows, and ``setups`` (the set-up each part's stats name)
    splits them per set-up under ``setups``, each with its roles (Summary.per_setup) and rows, spec=none's too."""
    auto = config["spec"]["method"] == "auto"
    k = config["spec"].get("num_speculative_tokens")
    if not auto and (config["spec"]["method"] == "none" or not k):
        return None
    refused = summary.refused_acceptance()
    if refused:
        log.warning("no %s: the summary refused the rows' acceptance figures (%s)", PROFILE_FILE, refused)
        return None
    sums: dict[str, _Sums] = defaultdict(lambda: _Sums(k or 0))
    by_setup: dict[str, _Sums] = defaultdict(_Sums)
    setup_k: dict[str, int] = {}
    columns = _COLUMNS + (_SETUP_COLUMNS if auto else [])
    for number, part in enumerate(parts):
        named = setups[number] if setups else None
        for row in pq.read_table(part, columns=columns).to_pylist():
            if auto:
                # A part's stats name its set-up exactly (a k schedule too); its rows, the method and largest k.
                setup = named or spec_label(row["method"], row["num_speculative_tokens"])
                by_setup[setup].rows.add(row["row_id"])
                setup_k[setup] = max(setup_k.get(setup, 0), row["num_speculative_tokens"] or 0)
            if row["status"] != STATUS_OK or row["spec_steps"] is None or not row["acceptance_histogram"]:
                continue
            sums[OVERALL].add(row)
            if row["category"] is not None:
                sums[row["category"]].add(row)
            if auto:
                by_setup[setup].add(row)
    if OVERALL not in sums:
        return None
    k = max(setup_k.values(), default=0) if auto else k
    overall = sums[OVERALL].profile(k)
    profile = {
        "method": config["spec"]["method"],
        "k": k,
        "engine": config["engine"]["backend"],
        "model": config["model"]["path"],
        **overall,
        "synthetic_acceptance_rates": overall["marginal_acceptance"],
        "categories": {name: s.profile(k) for name, s in sorted(sums.items()) if name != OVERALL},
    }
    if auto:
        roles = {label: entry["roles"] for label, entry in (summary.per_setup or {}).items()}
        profile["setups"] = {
            label: {
                "roles": roles.get(label, []),
                "k": setup_k[label] or None,
                **(s.profile(setup_k[label]) if setup_k[label] else {"rows": len(s.rows)}),
            }
            for label, s in sorted(by_setup.items())
        }
    return profile


def profile_problem(folder: RunFolder, config: dict[str, Any]) -> str | None:
    """What is wrong with a finished shard's profile file: damaged, or missing where its rows make one (it is looked
    for only then: a run that did not speculate has none to miss); None when it is whole or none is due."""
    try:
        if read_profile(folder.profile_path) is not None:
            return None
    except RecordError as exc:
        return exc.problem
    if config["spec"]["method"] == "none" or _shard_profile(folder, config) is None:
        return None
    return f"{folder.profile_path.relative_to(folder.root)} is missing"


def rebuild_profile(folder: RunFolder, config: dict[str, Any]) -> None:
    """Write a finished shard's profile again from its rows and summary, as the shard wrote it when it finished."""
    write_profile(folder.profile_path, _shard_profile(folder, config))


def _shard_profile(folder: RunFolder, config: dict[str, Any]) -> dict[str, Any] | None:
    return speculation_profile(folder.parts(), config, folder.read_summary(), folder.part_setups())
