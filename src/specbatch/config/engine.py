"""The engine group (``engine/``): the neutral engine config, and how each backend's own options join it.

A backend is the package ``specbatch.backends.<engine.backend>`` (the config names what it loads, as Hydra's
``_target_`` does), found here by that convention: no table lists the backends, a new one is a folder. Its light
``__init__`` declares ``Options`` (a dataclass of its knobs) and ``ENGINE`` (its engine class, "module:Class").

Users type every knob flat, as they always have (``engine.url=...``, ``model.gguf=...``): the sections Hydra
composes are the neutral ones plus every backend's knobs (:func:`section_class`), so an override of any backend is
a known key. :func:`check_backend_knobs` then refuses, in one line naming the backend that has it, a knob of another
backend set to anything but its default, and each backend reads its own knobs as its ``Options``
(:func:`backend_options`). The recorded config keeps the flat shape it always had, so run folders, digests and
run.json files written before stay as they were.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import pkgutil
import typing
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, TypeVar

from omegaconf import MISSING

from specbatch.common.errors import ConfigError, require
from specbatch.config.declarations import EVERY_BACKEND, OLD_RUNS_DEFAULT, ONLY_BACKENDS, Identity, identities

_FOLDER, _ENGINE = Identity.run_folder, Identity.engine
# The package whose sub-packages are the backends, one each.
BACKENDS_PACKAGE = "specbatch.backends"
# engine.backend's default, and what runs written before it existed ran on.
DEFAULT_BACKEND = "vllm"
_Options = TypeVar("_Options")


@dataclass
class EngineConfig:
    """What every backend means the same way (group ``engine/``); each backend's own knobs are its ``Options``."""

    # Preset name, recorded with the run (cpu, gpu, ...).
    name: str = MISSING
    # Which engine generates: the backend package specbatch.backends.<backend> (vllm: offline vllm.LLM; server: a
    # running OpenAI-compatible server at engine.url; llama_cpp: llama.cpp's llama-server, started by the job with
    # model.gguf; dummy: no model, for tests). Runs written before it existed ran on vLLM.
    backend: str = field(default=DEFAULT_BACKEND, metadata={OLD_RUNS_DEFAULT: DEFAULT_BACKEND})
    # The batch: requests the engine runs at once (null: the backend's default). chunk_size does not change it.
    # Not in the workload: a comparison sets runs at different batch sizes side by side.
    max_num_seqs: int | None = field(default=None, metadata=identities(_FOLDER, _ENGINE))
    # Engine seed.
    seed: int = 0
    # One short request before timing, so JIT and first-call costs are not counted as generation time.
    warmup: bool = True

    def __post_init__(self) -> None:
        backend_package(self.backend)
        require(
            self.max_num_seqs is None or self.max_num_seqs >= 1,
            f"engine.max_num_seqs={self.max_num_seqs} must be 1 or more (or null for the backend's default)",
        )


@functools.cache
def backend_names() -> tuple[str, ...]:
    """The backends there are: the sub-packages of specbatch.backends that declare an ENGINE."""
    package = importlib.import_module(BACKENDS_PACKAGE)
    found = [info.name for info in pkgutil.iter_modules(package.__path__) if info.ispkg]
    # A fixed order for messages: reverse alphabetical puts the default (vllm) first and the tests' dummy last.
    return tuple(sorted((name for name in found if hasattr(_package(name), "ENGINE")), reverse=True))


def _package(name: str) -> ModuleType:
    return importlib.import_module(f"{BACKENDS_PACKAGE}.{name}")


def backend_package(name: str) -> ModuleType:
    """The package of backend ``name`` (an engine.backend value); ConfigError listing the real ones otherwise."""
    if name not in backend_names():
        raise ConfigError(f"engine.backend={name} is not an engine: use one of {', '.join(backend_names())}")
    return _package(name)


@dataclass(frozen=True)
class Knob:
    """One backend knob as users type it: its section, its field (declared by its backends' Options) and owners."""

    section: str
    field: dataclasses.Field[Any]
    hint: Any
    # The backends whose Options declare it.
    owners: tuple[str, ...]

    @property
    def key(self) -> str:
        return f"{self.section}.{self.field.name}"

    def foreign_to(self, backend: str) -> bool:
        """Whether a job on ``backend`` has no use for this knob (the engine presets' knobs are every backend's)."""
        return backend not in self.owners and not self.field.metadata.get(EVERY_BACKEND)

    @property
    def default(self) -> Any:
        f = self.field
        return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


@functools.cache
def knobs() -> dict[str, Knob]:
    """Every backend's knobs by their dotted key (``engine.url``, ``model.gguf``), in backend order then field
    order; a knob several backends declare (engine.url) appears once with all of them as owners."""
    out: dict[str, Knob] = {}
    for name in backend_names():
        options = _package(name).Options
        hints = typing.get_type_hints(options)
        for f in dataclasses.fields(options):
            key = f"{options.SECTIONS.get(f.name, 'engine')}.{f.name}"
            if key in out:
                known = out[key]
                assert (known.hint, known.default) == (hints[f.name], f.default), f"{key} declared two ways"
                out[key] = dataclasses.replace(known, owners=(*known.owners, name))
            else:
                out[key] = Knob(key.partition(".")[0], f, hints[f.name], (name,))
    return out


def backend_keys(section: str) -> frozenset[str]:
    """The knobs backends add to ``section`` (``model`` → gguf): e.g. what names the weights' file, which a
    comparison across engines leaves out as it leaves out model.dtype."""
    return frozenset(k.field.name for k in knobs().values() if k.section == section)


def _schema_field(knob: Knob) -> tuple[str, Any, dataclasses.Field[Any]]:
    """The knob as a field of its composed section; its metadata says which backends read it."""
    metadata = dict(knob.field.metadata)
    # Only an engine knob sits beside engine.backend, which identity's projection reads to tell whose it is.
    if knob.section == "engine" and not metadata.get(EVERY_BACKEND):
        metadata[ONLY_BACKENDS] = frozenset(knob.owners)
    return knob.field.name, knob.hint, field(default=knob.default, metadata=metadata)


@functools.cache
def section_class(base: type, section: str) -> type:
    """``base`` (a section's dataclass) with the backends' knobs typed under ``section`` added: what Hydra composes
    and the job holds."""
    extra = [_schema_field(k) for k in knobs().values() if k.section == section]
    if not extra:
        return base
    # Pickled by its base and section (a made class has no importable name; a job may cross processes).
    namespace = {"__reduce__": lambda self: (_restore, (base, section, dict(self.__dict__)))}
    return dataclasses.make_dataclass(f"{base.__name__}WithBackends", extra, bases=(base,), namespace=namespace)


def _restore(base: type, section: str, state: dict[str, Any]) -> Any:
    """A pickled section back, as it was (its checks ran when it was built)."""
    restored = object.__new__(section_class(base, section))
    restored.__dict__.update(state)
    return restored


def check_backend_knobs(sections: dict[str, Any], backend: str) -> None:
    """Refuse a knob of another backend set to anything but its default: one line naming the backend that has it.
    ``sections`` maps a section name to the composed section (an object or a dict)."""
    for key, knob in knobs().items():
        if not knob.foreign_to(backend):
            continue
        section = sections.get(knob.section)
        name = knob.field.name
        value = section.get(name, knob.default) if isinstance(section, dict) else getattr(section, name, knob.default)
        value = getattr(value, "value", value)
        if value != knob.default:
            owners = " or ".join(f"engine.backend={owner}" for owner in knob.owners)
            # As users type it (engine.multiprocessing=true).
            typed = str(value).lower() if isinstance(value, bool) else value
            raise ConfigError(
                f"{key}={typed} is a knob of {owners}, not of engine.backend={backend}: drop {key}, or run on {owners}"
            )


def backend_options(job: Any, options: type[_Options]) -> _Options:
    """A backend's ``Options`` with the job's values (each knob from its section), checked by its __post_init__. A
    section built in code without the backends' knobs (a plain SpecConfig) gives their defaults."""
    values = {}
    for f in dataclasses.fields(options):  # type: ignore[arg-type]
        section = getattr(job, options.SECTIONS.get(f.name, "engine"))  # type: ignore[attr-defined]
        if hasattr(section, f.name):
            values[f.name] = getattr(section, f.name)
    return options(**values)
