"""The three identities of a job, computed from what each config field declares (:class:`Identity`).

- **run folder**: the digest in ``<spec>[-k<k>]-<digest>``; the same set-up finds its own folder, two different
  set-ups never share one.
- **engine**: a started engine's fingerprint; a shared engine serves only the jobs that agree on it.
- **workload**: what a comparison matches runs on, and so which baseline a run is measured against.

The fields declare them in :mod:`specbatch.config.schema` (``metadata=identities(...)``): every top-level field of
``JobConfig``, and the few fields of a section that belong to fewer identities than their section. One projection
serves all three: keep what belongs to the identity, drop the rest. A key the schema does not know (a run written
by another version) is kept, so runs that differ in it never count as the same; a field a run was written without
takes its declared ``OLD_RUNS_DEFAULT``.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import json
import typing
from dataclasses import dataclass
from typing import Any

from specbatch.common.masking import MASK
from specbatch.config.declarations import ABSENT_WHEN_NULL, IDENTITY, OLD_RUNS_DEFAULT, ONLY_BACKENDS, Identity
from specbatch.config.schema import JobConfig, composed_hints
from specbatch.config.serialise import to_plain_dict

# Hex digits of the run folder's and the workload's digest (the engine's fingerprint keeps them all).
SHORT_DIGEST = 8
_NO_DEFAULT = object()


@dataclass(frozen=True)
class FieldIdentity:
    """What one config key (dotted, e.g. ``engine.max_num_seqs``) declares or inherits."""

    identities: frozenset[Identity]
    # A section (a nested dataclass) is projected field by field.
    section: bool
    # Its value in configs written before the field existed; _NO_DEFAULT when none is declared.
    old_runs_default: Any = _NO_DEFAULT
    # An engine field only these backends read (None: all of them); in no identity of another backend's job.
    only_backends: frozenset[str] | None = None
    # Left out of every identity while null (a field added later whose null is "off": old digests stay).
    absent_when_null: bool = False


@functools.cache
def field_identities() -> dict[str, FieldIdentity]:
    """Every key of the job config (dotted) → its identities. A field of a section inherits its section's unless it
    declares its own, which only narrow them; an undeclared top-level field would belong to all (the safe side: it
    separates run folders), and a test refuses it."""

    def walk(cls: type, prefix: str, inherited: frozenset[Identity]) -> dict[str, FieldIdentity]:
        out: dict[str, FieldIdentity] = {}
        hints = composed_hints(cls)
        for f in dataclasses.fields(cls):
            key, hint = prefix + f.name, hints[f.name]
            own = f.metadata.get(IDENTITY)
            ids = inherited if own is None else inherited & own
            # An optional section (spec.auto: AutoConfig | None) is projected field by field too, when it is set.
            hint = next((a for a in typing.get_args(hint) if dataclasses.is_dataclass(a)), hint)
            section = dataclasses.is_dataclass(hint)
            out[key] = FieldIdentity(
                ids,
                section,
                f.metadata.get(OLD_RUNS_DEFAULT, _NO_DEFAULT),
                f.metadata.get(ONLY_BACKENDS),
                bool(f.metadata.get(ABSENT_WHEN_NULL)),
            )
            if section:
                out.update(walk(hint, key + ".", ids))
        return out

    return walk(JobConfig, "", frozenset(Identity))


def identity_fields(identity: Identity) -> list[str]:
    """The top-level fields that belong to ``identity``, in schema order (e.g. for the docs' description)."""
    return [key for key, f in field_identities().items() if "." not in key and identity in f.identities]


def project(plain: dict[str, Any], identity: Identity, prefix: str = "") -> dict[str, Any]:
    """The part of a plain config that belongs to ``identity``: of ``to_plain_dict``, or of a run's recorded config
    once ``with_old_run_defaults`` has given it the fields added since."""
    fields = field_identities()
    out: dict[str, Any] = {}
    # Whose backend-only fields count: the section's own backend.
    backend = plain.get("backend")
    for name, value in plain.items():
        declared = fields.get(prefix + name)
        if declared is None:
            out[name] = value
        elif declared.only_backends is not None and backend not in declared.only_backends:
            continue
        elif declared.absent_when_null and value is None:
            continue
        elif identity in declared.identities:
            nested = declared.section and isinstance(value, dict)
            out[name] = project(value, identity, f"{prefix}{name}.") if nested else value
    return out


def with_old_run_defaults(plain: dict[str, Any]) -> dict[str, Any]:
    """A run's recorded plain config with every field it was written without that declares ``OLD_RUNS_DEFAULT``
    (a field added since) set to that value, as today's version would record the same run; a copy."""
    out = copy.deepcopy(plain)
    for key, declared in field_identities().items():
        if declared.old_runs_default is _NO_DEFAULT:
            continue
        *sections, name = key.split(".")
        section: Any = out
        for part in sections:
            section = section.get(part) if isinstance(section, dict) else None
        if isinstance(section, dict) and name not in section:
            section[name] = copy.deepcopy(declared.old_runs_default)
    return out


def _digest(data: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def run_folder_config(job: JobConfig) -> dict[str, Any]:
    """What the run folder's digest covers: everything that changes the outputs, the timings or the parts."""
    return project(to_plain_dict(job), Identity.run_folder)


def run_folder_digest(job: JobConfig, length: int = SHORT_DIGEST) -> str:
    """The ``<digest>`` of the run folder ``<spec>[-k<k>]-<digest>``."""
    return _digest(run_folder_config(job))[:length]


def recorded_run_folder_digest(plain: dict[str, Any]) -> str | None:
    """The ``<digest>`` of a run's recorded plain config (upgraded: old runs' fields filled in), as
    :func:`run_folder_digest` gave it for the job that wrote it; None when a secret of it was masked before it was
    recorded (the digest was taken of the real value, which the record no longer holds)."""
    identity = project(plain, Identity.run_folder)
    if MASK in json.dumps(identity):
        return None
    return _digest(identity)[:SHORT_DIGEST]


def engine_identity(job: JobConfig) -> str:
    """The fingerprint of the engine this job needs: a started engine may serve it only when the two are equal."""
    return _digest(project(to_plain_dict(job), Identity.engine))


def workload_config(plain: dict[str, Any]) -> dict[str, Any]:
    """What must match for two runs to be compared, from a run's recorded plain config (old runs' included)."""
    return project(with_old_run_defaults(plain), Identity.workload)


def workload_digest(plain: dict[str, Any]) -> str:
    """The workload key of a run's recorded plain config: runs with the same key are compared with each other."""
    return _digest(workload_config(plain))[:SHORT_DIGEST]
