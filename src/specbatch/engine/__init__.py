"""Engines behind one interface (``base.Engine``), picked by ``engine.backend``: the backend package
``specbatch.backends.<engine.backend>`` names its engine class (``ENGINE``, "module:Class"), found by that
convention (specbatch.config.engine.backend_package), so no table lists the backends and this package imports none.

Only the vLLM backend imports vLLM; the rest of the job sees requests and completions (``base``) and asks the
backend's class, never its name, what it needs to know about it. A backend module is imported when it is asked for,
so choosing ``dummy`` never loads vLLM.
"""

from __future__ import annotations

import importlib
from typing import Any

from specbatch.common.interrupts import raise_if_stopped
from specbatch.config import ConfigError, JobConfig
from specbatch.config.engine import backend_package
from specbatch.engine.base import (
    Completion,
    Engine,
    EngineUnavailable,
    Request,
    RequestRefused,
    Sample,
    StepLoad,
)
from specbatch.methods import SpecMethod, simulated


def backend_class(name: str) -> type[Engine]:
    """The class of backend ``name`` (an engine.backend value); ConfigError listing the real ones otherwise."""
    module, _, cls = backend_package(name).ENGINE.partition(":")
    backend = getattr(importlib.import_module(module), cls)
    assert issubclass(backend, Engine) and backend.name == name, f"specbatch.backends.{name}.ENGINE names {backend}"
    return backend


def recorded_backend(config: dict[str, Any]) -> type[Engine]:
    """The backend of a run from its recorded config (run.json's ``config`` as RunFolder.read_run_record gives it)."""
    return backend_class(config["engine"]["backend"])


def not_a_models_answers(config: dict[str, Any]) -> str | None:
    """Why a run's tokens are not its target's answers, from its recorded config (None: they are), e.g. ``ran
    engine.backend=dummy: its tokens were made up by ...``: a run at a given acceptance (spec=simulate: accepted
    placeholders in its text), or a backend without a model. What checks or learns from the target's distribution
    (jobs/check_lossless.py, jobs/export_drafter_data.py) has nothing to take from such a run."""
    method = config["spec"]["method"]
    if simulated(method):
        return (
            f"ran spec.method={method}, at a given acceptance: its text is not a real output (accepted placeholders "
            "are in it)"
        )
    made_up = recorded_backend(config).tokens_without_a_model
    if made_up is not None:
        return f"ran engine.backend={config['engine']['backend']}: its tokens were {made_up}"
    return None


def validate_job(job: JobConfig) -> None:
    """The backend's refusals of the job's config (Engine.validate): before anything is written or loaded. A job
    that chooses its set-up (spec=auto) never runs as itself: here only whether the backend can switch set-ups;
    its steps (specbatch.auto) check each candidate's job."""
    backend = backend_class(job.engine.backend)
    if job.spec.method is SpecMethod.auto:
        if backend.fixed_speculation is not None:
            raise ConfigError(f"spec=auto cannot run on engine.backend={backend.name}: {backend.fixed_speculation}")
        return
    backend.validate(job)


def check_engine(job: JobConfig) -> None:
    """The backend's own checks before anything is written (e.g. that a server answers at engine.url)."""
    backend_class(job.engine.backend).check(job)


def preflight_skipped(job: JobConfig) -> str | None:
    """Why the method's local checks (config.preflight) do not apply to this job's backend; None when they do."""
    return backend_class(job.engine.backend).preflight_skipped


def figures_from_a_server(job: JobConfig) -> bool:
    """Whether this job's speculative figures come from a server (see Engine.figures_from_a_server)."""
    return backend_class(job.engine.backend).figures_from_a_server


def engine_fingerprint(job: JobConfig) -> str:
    """What a started engine for ``job`` is built from (Engine.fingerprint_of): a shared engine may only serve jobs
    with the same fingerprint."""
    return backend_class(job.engine.backend).fingerprint_of(job)


def import_engine_library(job: JobConfig) -> None:
    """Import the library this job's backend builds its engine with (Engine.import_library), before start_engine."""
    backend_class(job.engine.backend).import_library(job)


def start_engine(job: JobConfig) -> Engine:
    """Start the engine ``engine.backend`` names (warm-up included); the caller closes it. Never once the process
    was asked to stop (specbatch.common.interrupts)."""
    raise_if_stopped(f"starting the {job.engine.backend} engine for {job.spec.label}")
    return backend_class(job.engine.backend).start(job)


__all__ = [
    "backend_class",
    "not_a_models_answers",
    "figures_from_a_server",
    "Completion",
    "Engine",
    "EngineUnavailable",
    "Request",
    "RequestRefused",
    "Sample",
    "StepLoad",
    "check_engine",
    "preflight_skipped",
    "engine_fingerprint",
    "import_engine_library",
    "recorded_backend",
    "start_engine",
    "validate_job",
]
