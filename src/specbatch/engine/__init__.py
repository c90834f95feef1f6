"""Engines behind one interface (``base.Engine``), picked by ``engine.backend`` from a small registry.

Only the vLLM backend imports vLLM; the rest of the job sees requests and completions (``base``). A backend module
is imported when it is started, so choosing ``dummy`` never loads vLLM.
"""

from __future__ import annotations

import importlib

from specbatch.config import JobConfig
from specbatch.engine.base import (
    Completion,
    Engine,
    Request,
    RequestRefused,
    Sample,
    engine_fingerprint,
)

# engine.backend -> "module:class"; the class has ``start(job) -> Engine``. config.BACKENDS lists the same names.
REGISTRY = {
    "vllm": "specbatch.engine.vllm_offline:VllmEngine",
    "dummy": "specbatch.engine.dummy:DummyEngine",
}


def start_engine(job: JobConfig) -> Engine:
    """Start the engine ``engine.backend`` names (warm-up included); the caller closes it."""
    module, _, cls = REGISTRY[job.engine.backend].partition(":")
    return getattr(importlib.import_module(module), cls).start(job)


__all__ = [
    "REGISTRY",
    "Completion",
    "Engine",
    "Request",
    "RequestRefused",
    "Sample",
    "engine_fingerprint",
    "start_engine",
]
