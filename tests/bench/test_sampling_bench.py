"""jobs/bench.py --sampling, without an engine: every checked set-up composes into a run folder of its own within the
issue's token budget, each planted fault runs the engine with a sampler other than the one it is checked against,
and the prefix check's prompts are long enough for their samples to share the first KV block (what makes that check
affordable on a CPU)."""

from __future__ import annotations

import json
from pathlib import Path

from transformers import AutoTokenizer

from conftest import compose_job
from specbatch.analysis.lossless.sampler import Sampler
from specbatch.bench.sampling_bench import CHECK_TOKENS, CHECKED, SENTENCES, checked_overrides, write_copy_prompts
from specbatch.data.prompts import render
from specbatch.data.rows import SourceRow
from specbatch.run.folder import RunFolder

# vLLM's CPU KV block (vllm/platforms/cpu.py: 128 unless set): a prompt's full blocks are what prefix caching shares.
CPU_KV_BLOCK = 128


def test_each_checked_set_up_has_its_own_folder_within_the_budget(tmp_path: Path) -> None:
    folders, methods = set(), set()
    for setup in CHECKED:
        job = compose_job(checked_overrides(setup, tmp_path, "checked"))
        folders.add(RunFolder.for_job(job).root)
        methods.add(job.spec.method)
        assert job.model.dtype == "float32" and job.sampling.temperature > 0
        assert job.max_samples * job.sampling.n * job.sampling.max_tokens <= CHECK_TOKENS, setup.name
        ran = Sampler.of(job.sampling)
        # A planted fault is a sampler other than the one asked; the others are checked against their own.
        assert (setup.planted is not None) == (setup.planted not in (None, ran)), setup.name
    assert len(folders) == len(CHECKED)
    assert {"none", "ngram", "suffix", "draft_model", "eagle"} <= methods


def test_the_prompts_fill_more_than_one_kv_block_with_the_chat_template(tmp_path: Path) -> None:
    path = tmp_path / "prompts.jsonl"
    job = compose_job(["model=smollm2_135m", *write_copy_prompts(path)])
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["text"].rsplit(": ", 1)[1] for r in rows] == list(SENTENCES)
    tokenizer = AutoTokenizer.from_pretrained(job.model.path)
    for row in rows:
        # The prompt as the job renders it from this data set's config.
        prompt = render(SourceRow(row["id"], text=row["text"]), 1, [], job.dataset, tokenizer)
        # Shared: the first block; each sample computes the rest of its prompt (a few tokens) and its own.
        assert CPU_KV_BLOCK < len(prompt.token_ids) <= CPU_KV_BLOCK + 8, (row["id"], len(prompt.token_ids))
