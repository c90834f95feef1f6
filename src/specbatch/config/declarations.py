"""What a config field declares about itself: the identities it belongs to and the value old runs had.

:mod:`specbatch.config.identity` computes the run folder's digest, the engine's fingerprint and the comparison's
workload from these declarations (schema fields carry them as ``metadata``).
"""

from __future__ import annotations

import enum
from typing import Any


class Identity(enum.StrEnum):
    """What a config field is part of. A field in none of them changes nothing that is generated or measured."""

    # The run folder's digest: the same set-up finds its own folder, two different set-ups never share one.
    run_folder = "run_folder"
    # A started engine: a shared engine serves only jobs that agree on every field of it.
    engine = "engine"
    # The comparison's workload: runs are compared (and matched to a baseline) only when they agree on it.
    workload = "workload"


# Field metadata keys: the identities of a field, and the value a field takes in configs written before it existed.
IDENTITY = "identity"
OLD_RUNS_DEFAULT = "old_runs_default"
# An engine field only these backends read: in no identity of a job on another backend (so adding one leaves the
# digests of every other backend's runs as they were). Not written by hand: specbatch.config.engine derives it from
# the backends whose options declare the field.
ONLY_BACKENDS = "only_backends"
# A backend's knob that the engine presets (conf/engine/) set whatever the backend, and that every backend's
# identities have always counted: a preset may set it for any backend, and it stays in every job's digests.
EVERY_BACKEND = "every_backend"
# A field added after runs were written that is left out of every identity while it is null (its "off" value), so
# the runs written before it keep their digests; set, it counts like any field of its section.
ABSENT_WHEN_NULL = "absent_when_null"


def identities(*names: Identity) -> dict[str, Any]:
    """Field metadata declaring the identities a field belongs to; ``identities()`` says deliberately none.

    Every top-level field of :class:`JobConfig` declares them. A field of a section inherits its section's unless
    it declares its own, which can only narrow them.
    """
    return {IDENTITY: frozenset(names)}


def absent_when_null(*names: Identity) -> dict[str, Any]:
    """Metadata of a field added later: in no identity while null; set, in ``identities(*names)`` (with no names:
    its section's)."""
    return {**(identities(*names) if names else {}), ABSENT_WHEN_NULL: True}


def every_backend(*names: Identity) -> dict[str, Any]:
    """Metadata of a backend's knob the engine presets set for every backend (see EVERY_BACKEND); with no names it
    keeps its section's identities."""
    return {**(identities(*names) if names else {}), EVERY_BACKEND: True}
