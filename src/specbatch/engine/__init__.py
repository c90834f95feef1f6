"""Engines behind one interface (``base.Engine``), picked by ``engine.backend`` from a small registry.

Only the vLLM backend imports vLLM; the rest of the job sees requests and completions (``base``). A backend module
is imported when it is started, so choosing ``dummy`` never loads vLLM.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from specbatch.config import JobConfig
from specbatch.engine.base import (
    Completion,
    Engine,
    EngineUnavailable,
    Request,
    RequestRefused,
    Sample,
    engine_fingerprint,
)

# engine.backend -> "module:class"; the class has ``start(job) -> Engine``. config.BACKENDS lists the same names.
REGISTRY = {
    "vllm": "specbatch.engine.vllm_offline:VllmEngine",
    "server": "specbatch.engine.server:ServerEngine",
    "llama_cpp": "specbatch.engine.llama_cpp:LlamaCppEngine",
    "dummy": "specbatch.engine.dummy:DummyEngine",
}


def _backend(job: JobConfig) -> type[Engine]:
    module, _, cls = REGISTRY[job.engine.backend].partition(":")
    return getattr(importlib.import_module(module), cls)


def check_engine(job: JobConfig) -> None:
    """The backend's own checks before anything is written (e.g. that a server answers at engine.url)."""
    _backend(job).check(job)


def preflight_skipped(job: JobConfig) -> str | None:
    """Why the method's local checks (config.preflight) do not apply to this job's backend; None when they do."""
    return _backend(job).preflight_skipped


def figures_from_a_server(job: JobConfig) -> bool:
    """Whether this job's speculative figures come from a server (see Engine.figures_from_a_server)."""
    return _backend(job).figures_from_a_server


def start_engine(job: JobConfig, starting: Callable[[], None] | None = None) -> Engine:
    """Start the engine ``engine.backend`` names (warm-up included); the caller closes it.

    ``starting`` is called once the backend's imports are done, just before the engine is built: work it starts
    in another thread then overlaps the build (vLLM's is mostly waiting on its engine process), not the imports.
    """
    backend = _backend(job)
    backend.load()
    if starting is not None:
        starting()
    return backend.start(job)  # type: ignore[attr-defined]


__all__ = [
    "REGISTRY",
    "figures_from_a_server",
    "Completion",
    "Engine",
    "EngineUnavailable",
    "Request",
    "RequestRefused",
    "Sample",
    "check_engine",
    "preflight_skipped",
    "engine_fingerprint",
    "start_engine",
]
