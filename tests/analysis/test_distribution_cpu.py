"""The distribution check on real vLLM (embedded SmolLM2, float32, temperature 0.7): n-gram and suffix decoding keep
the distribution of spec=none, "consistent" at a shift of 0.15, and the samples' seeds reproduce them.

One engine per set-up (vLLM has no per-request switch that turns speculation off), each started in this process,
used and closed before the next: n-gram's first, so this also proves an engine starts in a process where an n-gram
engine ran (vLLM's CPU worker re-registered its Triton stand-ins at every start, scanning sys.modules; once n-gram had
loaded numba, the scan failed on llvmlite's wrappers: "'_lib_fn_wrapper' object has no attribute 'get'"). And its
batches are seeded samples whose prompts do not fit in one step's token budget: vLLM 0.32 rewinds a seeded request's
generator after a step that prefilled only part of its prompt, which CPU generators cannot do ("CPU Generator does
not use offset"), so the job prefills whole prompts without a GPU; the seeds still decide the tokens.

The prompts (jobs/bench.py --sampling's, specbatch.bench.sampling_bench) ask to copy a sentence, so drafting starts
at the second token, and were picked where the model's first two tokens spread over a few starts: 8 prompts x 112
samples then detect a shift of about 0.13 (0.118 on the mass they cover, plus the mass seen once: 0.126 for n-gram
and 0.128 for suffix at top-k 5, measured; at top-k 20 the rarer tokens took it to 0.149, too near 0.15).
Completions stop at 4 tokens: the check reads the first 1, 2, 4 and 8, its shift is stated for the best-covered
drafted prefix (the first 2), and a sample costs its tokens (its prompt's first 128 are shared: prefix caching).
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from conftest import compose_job
from specbatch.analysis.compare import compare
from specbatch.analysis.distribution import ALPHA, CONSISTENT, MAX_DETECTABLE_TV
from specbatch.analysis.run_data import load_run
from specbatch.backends.vllm.vllm_args import runs_in_process
from specbatch.bench.sampling_bench import SENTENCES, write_copy_prompts
from specbatch.engine import start_engine
from specbatch.pipeline import run_job

pytestmark = pytest.mark.slow

# 112 samples: the check sees a shift of 0.118 on the mass it covers (at 128, 0.111 for 1/7 more time).
PROMPTS, SAMPLES, TOKENS = len(SENTENCES), 112, 4
# Top-k instead of the preset's top-p: vLLM's CPU sampler applies top-p by sorting the whole vocabulary at every
# position (a third of this module's time), top-k by a partial selection. And top-k without top-p is the path of
# vllm_cpu_fixes' top-k correction: n-gram's first steps have no drafts, which stopped the engine without it.
TOP_K = 5
METHODS = ("ngram", "suffix")


def overrides(root: Path, spec: str, *extra: str) -> list[str]:
    return [
        *write_copy_prompts(root / "copy-prompts.jsonl"),
        f"spec={spec}",
        "model.dtype=float32",
        "sampling=sampled",
        "sampling.top_p=1.0",
        f"sampling.top_k={TOP_K}",
        f"sampling.n={SAMPLES}",
        f"sampling.max_tokens={TOKENS}",
        f"max_samples={PROMPTS}",
        "tracking=off",
        f"output_root={root}",
        *extra,
    ]


def rows_of(folder) -> list[dict[str, Any]]:
    return [r for p in sorted(folder.data_dir.glob("part-*.parquet")) for r in pq.read_table(p).to_pylist()]


def tokens_of(rows: list[dict[str, Any]]) -> dict[tuple[str, int], list[int]]:
    return {(r["row_id"], r["sample_index"]): r["completion_token_ids"] for r in rows}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("sampled")
    out: dict[str, Any] = {}
    for spec in (*METHODS, "none"):
        # Suffix at k=3 as n-gram: its preset's k=5 verifies two more positions a step, rejected mostly (what the
        # check reads is the same either way; the suite's time is not).
        job = compose_job(overrides(root, spec, *(["spec.num_speculative_tokens=3"] if spec == "suffix" else [])))
        assert runs_in_process(job)
        engine = start_engine(job)
        try:
            if spec == METHODS[0]:
                check_engine_kernels(engine)
                # Its matcher compiled once per machine, not per process (specbatch.common.numba_cache).
                from vllm.v1.spec_decode import ngram_proposer

                assert ngram_proposer.batch_propose_numba.stats.cache_path is not None
            out[spec] = run_job(job, engine=engine).folder
            scheduler = engine.llm.llm_engine.vllm_config.scheduler_config
            out[f"{spec} budget"] = (scheduler.max_num_seqs, scheduler.max_num_batched_tokens)
            if spec == "none":
                # The same rows again, on the same engine in another batch: each sample's seed decides its tokens.
                again = run_job(compose_job(overrides(root, spec, "run_name=again", "max_samples=1")), engine=engine)
                out["again"] = again.folder
        finally:
            engine.close()
        # The heap frozen for the start (the job's gc.freeze, then vLLM's own) is the collector's again once the
        # engine is closed: a sweep's next engine, or anything after, leaks nothing by it.
        assert gc.get_freeze_count() == 0, spec
    assert "llvmlite.binding.ffi" in sys.modules, "the case an engine after n-gram's guards: numba was loaded"
    return out


def check_engine_kernels(engine) -> None:
    """The rejection sampler's temperatures at draft positions go through the kernel this engine registered (vLLM's
    own CPU stand-in left them uninitialised: specbatch.backends.vllm.vllm_cpu_fixes)."""
    import torch
    from vllm.v1.sample.rejection_sampler import expand_batch_to_tokens

    spread = expand_batch_to_tokens(torch.tensor([0.7, -1.0]), torch.tensor([2, 3]), 3, -1, 1)
    assert spread.tolist() == pytest.approx([0.7, 0.7, 1.0])


def test_samples_reproduce_from_their_seeds(runs) -> None:
    # The engine's batch of these samples held more prompt tokens than two steps take: whole prompts were prefilled
    # over several steps.
    seqs, budget = runs["none budget"]
    rows = rows_of(runs["none"])
    assert min(seqs, PROMPTS * SAMPLES) * min(r["prompt_tokens"] for r in rows) > 2 * budget
    first, again = tokens_of(rows), tokens_of(rows_of(runs["again"]))
    assert len(again) == SAMPLES and all(first[key] == tokens for key, tokens in again.items())
    # ... and the samples of one prompt are not one sample repeated.
    assert len({tuple(first[("c0", s)]) for s in range(SAMPLES)}) > 1


def test_ngram_and_suffix_keep_the_distribution_at_temperature_0_7(runs) -> None:
    comparison = compare([load_run(runs[spec].root) for spec in ("none", *METHODS)])
    checks = {c.method: c.result for c in comparison.distribution}
    assert set(checks) == set(METHODS)
    for method, result in checks.items():
        assert (result.prompts, result.samples, result.baseline_samples) == (PROMPTS, SAMPLES, SAMPLES), method
        # Not flagged, and the test could have seen a shift of 0.15: the verdict the issue asks for.
        assert result.p_value >= ALPHA and result.verdict == CONSISTENT, (method, result)
        assert result.detectable_tv <= MAX_DETECTABLE_TV, (method, result)
    # Speculation acted within the tokens the check reads: drafts were accepted there.
    for row in (r for r in comparison.rows if r.method != "none"):
        assert row.mean_acceptance_length and row.mean_acceptance_length > 1.2, row
