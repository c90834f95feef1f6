"""Engines in the job's own process (the default without a GPU), one after another in one process, as a Hydra sweep
with the basic launcher, a benchmark or a test session runs them."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import PROJECT_ROOT, compose_job
from specbatch.engine import start_engine

pytestmark = pytest.mark.slow


# An engine after an n-gram engine in the same process: tests/analysis/test_distribution_cpu.py starts them so.


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


def test_seeded_sampling_of_a_batch_larger_than_one_steps_token_budget(tmp_path) -> None:
    # vLLM 0.32 rewinds a seeded request's generator after a step that prefilled only part of its prompt, which
    # CPU generators cannot do ("CPU Generator does not use offset"): the job ended at the first sampled batch whose
    # prompts did not fit in one step. Seeded sampled jobs prefill whole prompts on a machine without a GPU.
    import numpy as np
    import torch

    from specbatch.engine.vllm_offline import sampling_params

    job = compose_job(["sampling=sampled", "sampling.max_tokens=4", "model.dtype=float32", f"output_root={tmp_path}"])
    assert job.sampling.seed is not None and job.sampling.temperature > 0
    engine = start_engine(job)
    try:
        # The rejection sampler's temperatures at draft positions, through the kernel this engine registered
        # (vLLM's own CPU stand-in left them uninitialised: specbatch.engine.vllm_cpu_fixes).
        from vllm.v1.sample.rejection_sampler import expand_batch_to_tokens

        spread = expand_batch_to_tokens(torch.tensor([0.7, -1.0]), torch.tensor([2, 3]), 3, -1, 1)
        assert spread.tolist() == pytest.approx([0.7, 0.7, 1.0])
        budget = engine.llm.llm_engine.vllm_config.scheduler_config.max_num_batched_tokens
        ids = np.random.default_rng(0).integers(100, 20000, size=(3 * budget // 250 + 1, 250)).tolist()
        assert sum(map(len, ids)) > 2 * budget, "the prompts must not fit in one step, or nothing is split"
        prompts = [{"prompt_token_ids": p} for p in ids]
        first = engine.llm.generate(prompts, sampling_params(job.sampling), use_tqdm=False)
        again = engine.llm.generate(prompts[:3], sampling_params(job.sampling), use_tqdm=False)
    finally:
        engine.close()
    assert len(first) == len(ids) and all(len(o.outputs[0].token_ids) == 4 for o in first)
    # The seed still decides the tokens, whatever else was in the batch.
    assert [o.outputs[0].token_ids for o in again] == [o.outputs[0].token_ids for o in first[:3]]
