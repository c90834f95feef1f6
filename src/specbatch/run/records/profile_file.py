"""A speculation profile, ``stats/<shard>/speculation_profile.json`` (a shard's) and
``merged/speculation_profile.json`` (the merged run's): what its figures mean is
:mod:`specbatch.run.speculation_profile`'s, its shape NVIDIA ModelOpt's (:mod:`specbatch.run.profile_schema`); its
file is this module's.

Version: 2, which is ModelOpt's speculation profile schema 1.0 and says so in the schema's own key,
``schema_version`` (no ``format`` key is written: other tools read the file as theirs). Format 1, specbatch's own
shape (``k``, ``acceptance_length``, ``marginal_acceptance``, ``categories``, ... and no ``schema_version``), is
upgraded on read into schema 1.0 from the counts it kept (steps and accepted tokens per position give the whole
histogram); what it did not record stays null (the mean of each request's own AL, the target's revision and dtype,
the sampling and the machine). A file of schema 2.x or more, or with a ``format`` above 2, is refused. ModelOpt's own
profiles (schema 1.x) read as they are.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specbatch.common.atomic_files import atomic_write_json
from specbatch.engine.spec_metrics import histogram_from_accepted_per_position
from specbatch.methods.simulate import PROFILE_NAME
from specbatch.run.profile_schema import OURS, acceptance_figures, build_profile, checkpoint_id, schema_problems
from specbatch.run.records.record_files import RecordError, refuse_newer

PROFILE_FORMAT = 2
# Its file name, a shard's and the merged run's.
PROFILE_FILE = PROFILE_NAME
# The schema's key that tells a profile of format 2 from one of format 1.
_SCHEMA_KEY = "schema_version"
# What mends a damaged one: it is made from the rows, which are whole (status names a shard's, merge and a rerun of
# the finished shard write it again: specbatch.run.speculation_profile.rebuild_profile).
REBUILD = "python jobs/merge.py on the run folder, or a rerun of the shard, rebuilds it from the rows"
# The keys a profile of format 1 cannot be upgraded without.
_FORMAT_1_KEYS = ("method", "k", "drafts", "accepted_per_position")
# What format 1 kept of the figures it had no ModelOpt field for, under today's names.
_FORMAT_1_OURS = {
    "rows": "rows",
    "drafts": "drafts",
    "draft_tokens": "draft_tokens",
    "accepted_tokens": "accepted_tokens",
    "acceptance_rate": "draft_acceptance_rate",
}


def write_profile(path: Path, profile: dict[str, Any] | None) -> None:
    """Write ``profile`` at ``path``; None removes one written before, which no figures of today stand behind."""
    if profile is None:
        path.unlink(missing_ok=True)
    else:
        atomic_write_json(path, profile)


def read_profile(path: Path) -> dict[str, Any] | None:
    """The profile at ``path`` in schema 1.x (format 1 upgraded), or None when there is none; RecordError when a
    newer version wrote it or it is damaged (cut short, not an object, keys missing, no profile of schema 1.x or
    format 1)."""
    try:
        profile = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except ValueError as exc:  # cut short or overwritten
        raise RecordError(f"{path} is damaged (not JSON: {exc})", REBUILD) from None
    if not isinstance(profile, dict):
        raise RecordError(f"{path} is damaged (not a JSON object)", REBUILD)
    refuse_newer(profile, path, PROFILE_FORMAT, "speculation profile")
    if _SCHEMA_KEY not in profile:
        missing = [key for key in _FORMAT_1_KEYS if key not in profile]
        if missing:
            # Neither schema 1.x nor format 1 whole: a keyless (emptied) file says the schema's key is what it lacks.
            lacks = missing if len(missing) < len(_FORMAT_1_KEYS) else [_SCHEMA_KEY]
            raise RecordError(f"{path} is damaged (it lacks {', '.join(lacks)})", REBUILD)
        problems = _format_1_problems(profile)
        if problems:
            raise RecordError(f"{path} is damaged (a profile of format 1: {'; '.join(problems)})", REBUILD)
        profile = upgrade_profile(profile, measured=True)
    elif str(profile[_SCHEMA_KEY]).split(".")[0] != "1":
        raise RecordError(
            f"{path} is in ModelOpt's speculation profile schema {profile[_SCHEMA_KEY]} (this version reads 1.x)",
            "read it with a version of specbatch that knows that schema, or update this checkout",
        )
    problems = schema_problems(profile)
    if problems:
        raise RecordError(f"{path} is damaged (not a speculation profile: {'; '.join(problems)})", REBUILD)
    return profile


def _format_1_problems(old: dict[str, Any]) -> list[str]:
    """What keeps a profile of format 1 from being upgraded, each naming its field: the counts its histograms are
    made from, overall and per category, and the names it is described by. Counts that disagree with each other
    (more accepted than drafted) upgrade into rates that schema_problems refuses."""

    def count(value: Any) -> bool:
        # JSON's true is no count: bool is a subclass of int in Python.
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0

    k, categories = old["k"], old.get("categories")
    problems = [] if count(k) and k >= 1 else [f"k is {json.dumps(k)}, not an integer of 1 or more"]
    problems += [
        f"{key} is {json.dumps(old[key])}, not a name" for key in ("method", "model", "engine") if not _name(old, key)
    ]
    if not isinstance(categories, dict | None):
        problems.append(f"categories is {json.dumps(categories)}, not an object of figures per category")
        categories = None
    for where, figures in [("", old), *((f"categories.{name}.", f) for name, f in (categories or {}).items())]:
        if not isinstance(figures, dict):
            problems.append(f"{where[:-1]} is {json.dumps(figures)}, not an object of figures")
            continue
        drafts, accepted = figures.get("drafts"), figures.get("accepted_per_position")
        if not count(drafts):
            problems.append(f"{where}drafts is {json.dumps(drafts)}, not a count of steps (0 or more)")
        if not isinstance(accepted, list) or not all(count(n) for n in accepted):
            problems.append(
                f"{where}accepted_per_position is {json.dumps(accepted)}, not a count (0 or more) per position"
            )
    return problems


def _name(old: dict[str, Any], key: str) -> bool:
    # The method is required (read_profile checked it is there); the model and the engine may be absent or null.
    return isinstance(old[key], str) if key == "method" else isinstance(old.get(key), str | None)


def upgrade_profile(old: dict[str, Any], measured: bool, ours: dict[str, Any] | None = None) -> dict[str, Any]:
    """Schema 1.0 from a profile of format 1 (a run's, ``measured``, or a set-up of a prediction of format 1, not),
    with ``ours`` added to what it kept that the schema has no field for."""
    k = old["k"]

    def kept(figures: dict[str, Any]) -> dict[str, Any]:
        return {new: figures[key] for key, new in _FORMAT_1_OURS.items() if key in figures}

    def histogram(figures: dict[str, Any]) -> list[int]:
        return histogram_from_accepted_per_position(figures["drafts"], list(figures["accepted_per_position"]))

    return build_profile(
        histogram(old),
        k,
        method=old["method"],
        measured=measured,
        target_model={"id": checkpoint_id(old["model"])} if old.get("model") else None,
        per_category={
            name: {**acceptance_figures(histogram(figures), k), OURS: kept(figures)}
            for name, figures in sorted((old.get("categories") or {}).items())
        },
        measurement_conditions={"engine": old["engine"]} if old.get("engine") else None,
        ours={**kept(old), **(ours or {})},
    )
