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
# digests of every other backend's runs as they were).
ONLY_BACKENDS = "only_backends"
# A field added after runs were written that is left out of every identity while it is null (its "off" value), so
# the runs written before it keep their digests; set, it counts like any field of its section.
ABSENT_WHEN_NULL = "absent_when_null"


def identities(*names: Identity) -> dict[str, Any]:
    """Field metadata declaring the identities a field belongs to; ``identities()`` says deliberately none.

    Every top-level field of :class:`JobConfig` declares them. A field of a section inherits its section's unless
    it declares its own, which can only narrow them.
    """
    return {IDENTITY: frozenset(names)}


def server_only(*names: Identity, backends: tuple[str, ...] = ("server",)) -> dict[str, Any]:
    """Metadata of an engine field only the server backend (or ``backends``) reads: ``identities(*names)`` for their
    jobs, none else."""
    return {**identities(*names), ONLY_BACKENDS: frozenset(backends)}


def llama_cpp_only(*names: Identity) -> dict[str, Any]:
    """Metadata of an engine field only the llama_cpp backend reads."""
    return server_only(*names, backends=("llama_cpp",))


def vllm_only(*names: Identity) -> dict[str, Any]:
    """Metadata of an engine field only the offline vllm backend reads, left out of every identity while null."""
    return {**server_only(*names, backends=("vllm",)), ABSENT_WHEN_NULL: True}
