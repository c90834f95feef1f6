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
accepted, and the summary alone judges them (specbatch.run.summary).

A finished shard's profile that is damaged or missing is found (:func:`profile_problem`) and written again from the
rows (:func:`rebuild_profile`) by status, merge and a rerun (specbatch.run.status_merge, specbatch.run.executor).

A spec=auto run's profile is that of the rows its drafting set-ups generated, method ``auto``, at the largest k they
drafted (``accept_length_model`` ``measured_per_k``: its rates are of set-ups mixed, never to be cut to a smaller
k); each set-up apart, spec=none's pilot too, is under ``specbatch.setups``: its roles (Summary.per_setup), its k
and rows, and a drafting one's figures as the schema's per-category ones are (profile_schema.acceptance_figures)."""

from __future__ import annotations

import logging
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from specbatch.config import spec_label
from specbatch.methods.simulate import COVERAGE_FIELD
from specbatch.run.folder import RunFolder
from specbatch.run.output_rows import STATUS_OK
from specbatch.run.profile_schema import OURS, acceptance_figures, build_profile, checkpoint_id
from specbatch.run.records.profile_file import PROFILE_FILE, read_profile, write_profile
from specbatch.run.records.record_files import RecordError
from specbatch.run.summary import Summary

log = logging.getLogger(__name__)

_COLUMNS = ["row_id", "category", "status", "spec_steps", "draft_tokens", "acceptance_histogram", "completion_tokens"]
_SETUP_COLUMNS = ["method", "num_speculative_tokens"]
# The category name of the figures over every row.
OVERALL = "(all)"


class _Sums:
    """Drafting figures of some rows, added up: steps by tokens accepted, 0..k (a schedule's smaller k leave the
    rest at 0; k grows to the largest any of them drafted), draft tokens, rows, and each request's own AL."""

    def __init__(self, k: int = 0) -> None:
        self.histogram = [0] * (k + 1)
        self.draft_tokens = 0
        self.rows: set[str] = set()
        self.request_lengths: list[float] = []
        # Decode steps without a draft: each gives one token; the first token of a completion is the prefill's.
        self.steps_without_draft = 0

    def add(self, row: dict[str, Any]) -> None:
        histogram = row["acceptance_histogram"]
        # Kept whole if longer than k + 1, so that the profile's check sees a k below what ran.
        self.histogram += [0] * (len(histogram) - len(self.histogram))
        for j, steps in enumerate(histogram):
            self.histogram[j] += steps
        self.draft_tokens += row["draft_tokens"] or 0
        self.rows.add(row["row_id"])
        drafted = sum((j + 1) * n for j, n in enumerate(histogram))
        self.steps_without_draft += max(0, (row["completion_tokens"] or 0) - 1 - drafted)
        if sum(histogram):
            self.request_lengths.append(1 + sum(j * n for j, n in enumerate(histogram)) / sum(histogram))

    def ours(self) -> dict[str, Any]:
        """What the schema has no field for: rows, drafting steps, draft and accepted tokens, draft acceptance rate,
        and the share of decode steps that drafted (spec=simulate's draft_coverage: n-gram finds nothing to draft at
        some steps; a step cut short by max_tokens counts what it kept)."""
        accepted = sum(j * n for j, n in enumerate(self.histogram))
        drafts = sum(self.histogram)
        steps = drafts + self.steps_without_draft
        return {
            "rows": len(self.rows),
            "drafts": sum(self.histogram),
            "draft_tokens": self.draft_tokens,
            "accepted_tokens": accepted,
            "draft_acceptance_rate": accepted / self.draft_tokens if self.draft_tokens else 0.0,
            COVERAGE_FIELD: round(drafts / steps, 6) if steps else None,
        }

    def at(self, k: int) -> list[int]:
        """The histogram over 0..k accepted at least (what rows of a smaller k leave out counts 0 steps)."""
        return self.histogram + [0] * (k + 1 - len(self.histogram))


def speculation_profile(
    parts: list[Path], config: dict[str, Any], summary: Summary, setups: list[str | None] | None = None
) -> dict[str, Any] | None:
    """The profile of the rows in ``parts`` of a run with ``config`` (its recorded, plain config), whose summary is
    ``summary``; None when the run did not speculate, its rows carry no per-request figures, or the summary refused
    their figures (logged with its reason).

    spec=auto: the figures are those of its drafting set-ups' rows, and ``setups`` (the set-up each part's stats name)
    splits them per set-up under ``specbatch.setups``, each with its roles (Summary.per_setup), spec=none's too."""
    spec = config["spec"]
    auto = spec["method"] == "auto"
    k = spec.get("num_speculative_tokens")
    if not auto and (spec["method"] == "none" or not k):
        return None
    refused = summary.refused_acceptance()
    if refused:
        log.warning("no %s: the summary refused the rows' acceptance figures (%s)", PROFILE_FILE, refused)
        return None
    sums: dict[str, _Sums] = defaultdict(lambda: _Sums(k or 0))
    by_setup: dict[str, _Sums] = defaultdict(_Sums)
    setup_k: dict[str, int] = {}
    for number, part in enumerate(parts):
        named = setups[number] if setups else None
        for row in pq.read_table(part, columns=_COLUMNS + (_SETUP_COLUMNS if auto else [])).to_pylist():
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
    overall = sums.pop(OVERALL)
    lengths = overall.request_lengths
    ours = overall.ours()
    if auto:
        ours["setups"] = _setups(by_setup, setup_k, summary)
    return build_profile(
        overall.at(k),
        k,
        method=spec["method"],
        measured=True,
        target_model=target_model(config["model"]),
        draft_checkpoint=draft_checkpoint(spec),
        per_category={name: {**acceptance_figures(s.at(k), k), OURS: s.ours()} for name, s in sorted(sums.items())},
        mean_per_request=sum(lengths) / len(lengths) if lengths else None,
        measurement_conditions=measurement_conditions(config, summary.concurrency, summary.machine),
        ours=ours,
    )


def _setups(by_setup: dict[str, _Sums], setup_k: dict[str, int], summary: Summary) -> dict[str, dict[str, Any]]:
    """Each set-up of a spec=auto run apart: its roles, k (None for spec=none) and rows, and a drafting one's
    figures at its own k as a category's are (the schema's, then ours)."""
    roles = {label: entry["roles"] for label, entry in (summary.per_setup or {}).items()}
    out = {}
    for label, s in sorted(by_setup.items()):
        k = setup_k[label]
        figures = {**acceptance_figures(s.at(k), k), **s.ours()} if k else {"rows": len(s.rows)}
        out[label] = {"roles": roles.get(label, []), "num_speculative_tokens": k or None, **figures}
    return out


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


def profile_problem(folder: RunFolder, config: dict[str, Any]) -> str | None:
    """What is wrong with a finished shard's profile file: damaged, or missing where its rows make one (it is looked
    for only then: a run that did not speculate has none to miss); None when it is whole or none is due. A profile
    of an older format is whole: its reader upgrades it."""
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
