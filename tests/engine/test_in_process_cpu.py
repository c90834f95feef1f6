"""Engines in the job's own process (the default without a GPU), one after another in one process, as a Hydra sweep
with the basic launcher, a benchmark or a test session runs them."""

from __future__ import annotations

import sys

import pytest

from conftest import compose_job
from specbatch.engine import start_engine
from specbatch.serving.vllm_args import runs_in_process

pytestmark = pytest.mark.slow


def test_an_engine_after_an_ngram_engine_in_the_same_process_starts(tmp_path) -> None:
    # vLLM's CPU worker re-registered its Triton stand-ins at every start, scanning sys.modules; once n-gram had
    # loaded numba, the scan failed on llvmlite's wrappers ("'_lib_fn_wrapper' object has no attribute 'get'").
    for spec in ("ngram", "none"):
        job = compose_job([f"spec={spec}", "model.dtype=float32", "max_samples=2", f"output_root={tmp_path}"])
        assert runs_in_process(job)
        engine = start_engine(job)  # warms up: one short request each
        try:
            assert engine.warmup_seconds > 0
        finally:
            engine.close()
    assert "llvmlite.binding.ffi" in sys.modules, "the case this guards: numba was loaded by the n-gram engine"
