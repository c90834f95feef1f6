"""Engines in the job's own process (the default without a GPU), one after another in one process, as a Hydra sweep
with the basic launcher, a benchmark or a test session runs them."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import PROJECT_ROOT

pytestmark = pytest.mark.slow


# An engine after an n-gram engine in the same process, and seeded sampling of a batch larger than one step's token
# budget: tests/analysis/test_distribution_cpu.py runs them so.


def test_an_engine_starts_in_a_process_that_replayed_ngram_drafting_first(tmp_path) -> None:
    # A fresh process that loads numba (the prediction's replay calls vLLM's n-gram matcher) before its first
    # engine: vLLM's first kernel override registration then met llvmlite's wrappers (the failure the docstring of
    # tests/analysis/test_distribution_cpu.py names, without an engine before it). jobs/predict.py then an
    # in-process engine is what choosing a set-up for a job does.
    script = f"""
import numpy as np, sys
from specbatch.prediction.replay import replay
from specbatch.prediction.setups import NgramSetup
from specbatch.prediction.turns import ReplayTurn
turn = ReplayTurn("r", 1, 0, None, np.array([1, 2, 3, 1, 2], np.int32), np.array([3, 1, 2], np.int32), (0, 0, 0),
    (0, 0, 0))
assert replay([turn], NgramSetup(2, 1, 2), 2048)[0][1].drafts == 1
assert "llvmlite.binding.ffi" in sys.modules
sys.path.insert(0, {str(PROJECT_ROOT / "tests")!r})
from conftest import compose_job
from specbatch.engine import start_engine
engine = start_engine(compose_job(["spec=none", "model.dtype=float32", "output_root={tmp_path}"]))
engine.close()
print("started")
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and "started" in result.stdout, result.stderr[-3000:]
