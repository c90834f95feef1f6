"""The speculative methods, one module each (as vLLM's ``v1/spec_decode/``): its knobs, defaults, what it needs, its
checks before loading and its CPU stand-in, in a :class:`~specbatch.methods.method.Method` named ``METHOD``.

The set is discovered from this package's modules, so adding a method is one module (plus its ``conf/spec/`` preset
and a line in each backend's table that runs it): :class:`SpecMethod`, :data:`METHODS` and the lookups below are
built from what is found. Methods know no backend; ``none`` (the baseline) and ``auto`` (the chooser) are roles that
every part of the job may name.
"""

from __future__ import annotations

import enum
import importlib
import pkgutil
from typing import TYPE_CHECKING, Any

from specbatch.methods.labels import (
    MODE_DEFAULTS,
    READABLE_NAME_BYTES,
    Schedule,
    modes_set,
    schedule_key,
    spec_caption,
    spec_label,
    variant_caption,
)
from specbatch.methods.method import JobLike, Method

# Modules of this package that are not a method.
_HELPERS = frozenset({"method", "checkpoint_checks", "labels"})


def _discover() -> list[Method]:
    found = []
    for info in pkgutil.iter_modules(__path__):
        if info.name in _HELPERS or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        method = getattr(module, "METHOD", None)
        if not isinstance(method, Method) or method.name != info.name:
            raise TypeError(f"{module.__name__} must define METHOD = Method(name={info.name!r}, ...)")
        found.append(method)
    return sorted(found, key=lambda m: m.rank)


_FOUND = _discover()

if TYPE_CHECKING:
    # Its members are known only once the modules are found: type checkers see an enum whose attributes
    # (SpecMethod.ngram, ...) are members of it.
    class SpecMethod(enum.StrEnum):
        """Speculative decoding methods; ``none`` is the baseline every speedup is measured against."""

        def __getattr__(self, name: str) -> Any: ...

else:
    # Built from the modules (in their rank order), so a method module is all a new method needs here.
    SpecMethod = enum.StrEnum("SpecMethod", [(m.name, m.name) for m in _FOUND], module=__name__)
    SpecMethod.__doc__ = "Speculative decoding methods; ``none`` is the baseline every speedup is measured against."

METHODS: dict[SpecMethod, Method] = {SpecMethod(m.name): m for m in _FOUND}
# The roles: the baseline and the chooser. Every other method drafts.
ROLES = frozenset({SpecMethod("none"), SpecMethod("auto")})
# Methods that run a separate draft checkpoint named by spec.model, and what that checkpoint is called.
CHECKPOINT_KIND = {method: entry.checkpoint for method, entry in METHODS.items() if entry.checkpoint}
CHECKPOINT_METHODS = frozenset(CHECKPOINT_KIND)
# The methods replay predicts (specbatch.prediction); the others are measured without a prediction.
PREDICTABLE = frozenset(method for method, entry in METHODS.items() if entry.replay)
# spec=auto's default candidates besides the checkpoint methods of spec.auto.checkpoints: the baseline, then each
# method at the k its module names.
AUTO_DEFAULT_CANDIDATES = ("none", *(spec_label(m.name, k) for m in _FOUND for k in m.auto_default_ks))


def methods_owning(knob: str) -> frozenset[SpecMethod]:
    """The methods ``spec.<knob>`` belongs to (empty for a name no method declares)."""
    return frozenset(method for method, entry in METHODS.items() if knob in entry.knobs)


def simulated(method: str) -> bool:
    """Whether a (recorded) spec.method runs at a given acceptance (Method.simulated): its text is not a real output.
    False for a name this version does not know."""
    entry = METHODS.get(method)  # type: ignore[call-overload]
    return bool(entry and entry.simulated)


def preflight(job: JobLike) -> None:
    """Every check of the job's method that can run before the engine, in its order; raises ConfigError."""
    for check in METHODS[job.spec.method].checks:
        check(job)


__all__ = [
    "AUTO_DEFAULT_CANDIDATES",
    "CHECKPOINT_KIND",
    "CHECKPOINT_METHODS",
    "METHODS",
    "PREDICTABLE",
    "READABLE_NAME_BYTES",
    "ROLES",
    "JobLike",
    "Method",
    "Schedule",
    "SpecMethod",
    "methods_owning",
    "preflight",
    "simulated",
    "schedule_key",
    "spec_caption",
    "variant_caption",
    "modes_set",
    "MODE_DEFAULTS",
    "spec_label",
]
