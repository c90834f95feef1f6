"""spec=auto's records: the run's decision, ``decision.json`` (one per run, the first shard's wins), each shard's
plan, ``stats/<shard>/auto-plan.json`` (its prediction and which set-up measures which slice), and each shard's switch
back to spec=none, ``stats/<shard>/auto-switch.json`` (written only when its check found speculation slower), and the
set-up each shard pilots on, ``stats/<shard>/auto-pilot.json`` (written before its pilot runs, so that a resumed
shard pilots on the same one whatever earlier runs appeared meanwhile), and the choice a shard revised from more of
its rows, ``stats/<shard>/auto-revised.json`` (at most one, a set-up its running engine runs in place). What
they say is :mod:`specbatch.auto`'s; their files are this module's.

Version (``format``): 1 for all five (a file without the key is format 1 too); a newer one is refused. A key added
within format 1 is read with what it meant in the files written without it: a decision's ``decided_by`` (unknown:
null), ``k_schedule`` (null: the winner runs one k), ``schedule`` and ``costs`` (null: decided before spec=auto
timed steps); a pilot's ``streamed`` (null: the pilot ran as slices of its own, or as the one chunk of a shard
that cannot measure).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specbatch.run.records.record_files import create_stamped_once, read_checked

DECISION_FORMAT = 1
# Resume (specbatch.auto.generation), compare (analysis.run_data) and tracking read these. Without it the run has no
# decision yet, which its shards know how to handle.
_DECISION_KEYS = ("winner", "winner_caption", "why", "measured", "candidates")
_DECISION_FIX = (
    "restore it, or remove it so that the next shard to finish its measurements decides again (the rows already "
    "generated keep the set-up that generated them)"
)
_DECISION_ADDED: dict[str, Any] = {"decided_by": None, "k_schedule": None, "schedule": None, "costs": None}
# Read by the shard itself until its decision is made; made again from the pilot's parts when it is missing.
_PLAN_KEYS = ("predicted", "measure", "measuring", "why")
_PLAN_FIX = (
    "remove it and rerun the shard, which makes its plan again from its pilot's rows (a finished shard needs only "
    "the removal)"
)


def read_decision(path: Path) -> dict[str, Any] | None:
    """The run's decision; None until a shard has written it; RecordError when it is damaged or newer."""
    record = read_checked(path, _DECISION_KEYS, DECISION_FORMAT, "decision", _DECISION_FIX)
    return None if record is None else {**_DECISION_ADDED, **record}


def create_decision(path: Path, decision: dict[str, Any]) -> bool:
    """Write the run's decision unless a shard wrote one first; True when this one is the run's."""
    return create_stamped_once(path, decision, DECISION_FORMAT)


def read_plan(path: Path) -> dict[str, Any] | None:
    """A shard's plan; None until its pilot is in; RecordError when it is damaged or newer."""
    return read_checked(path, _PLAN_KEYS, DECISION_FORMAT, "plan", _PLAN_FIX)


def create_plan(path: Path, plan: dict[str, Any]) -> bool:
    """Write the shard's plan unless it has one; True when this one is it."""
    return create_stamped_once(path, plan, DECISION_FORMAT)


_SWITCH_KEYS = ("why", "figures")
_SWITCH_FIX = "remove it: the shard's remaining rows then run with the run's decision again, and are checked anew"


def read_switch(path: Path) -> dict[str, Any] | None:
    """A shard's switch back to spec=none; None when it has not switched; RecordError when damaged or newer."""
    return read_checked(path, _SWITCH_KEYS, DECISION_FORMAT, "switch back", _SWITCH_FIX)


def create_switch(path: Path, switch: dict[str, Any]) -> bool:
    """Write the shard's switch back unless it has one; True when this one is it."""
    return create_stamped_once(path, switch, DECISION_FORMAT)


_PILOT_KEYS = ("label", "source")
_PILOT_FIX = (
    "remove it and rerun the shard: it chooses its pilot's set-up again (its pilot's slices already written keep "
    "the set-up that generated them)"
)


def read_pilot(path: Path) -> dict[str, Any] | None:
    """The set-up a shard pilots on; None until it chose one; RecordError when damaged or newer."""
    return read_checked(path, _PILOT_KEYS, DECISION_FORMAT, "pilot", _PILOT_FIX)


def create_pilot(path: Path, pilot: dict[str, Any]) -> bool:
    """Write the shard's pilot set-up unless it has one; True when this one is it."""
    return create_stamped_once(path, pilot, DECISION_FORMAT)


_REVISED_KEYS = ("winner", "replaces", "why")
_REVISED_FIX = (
    "remove it: the shard's remaining rows then run with the run's decision, and its prediction is revised anew"
)


def read_revised(path: Path) -> dict[str, Any] | None:
    """A shard's revised choice; None when it has not revised; RecordError when damaged or newer."""
    record = read_checked(path, _REVISED_KEYS, DECISION_FORMAT, "revised choice", _REVISED_FIX)
    return None if record is None else {"k_schedule": None, **record}


def create_revised(path: Path, revised: dict[str, Any]) -> bool:
    """Write the shard's revised choice unless it has one; True when this one is it."""
    return create_stamped_once(path, revised, DECISION_FORMAT)
