"""jobs/bench.py --sampling's distribution check, without an engine: every set-up it runs composes into a run folder
of its own, and its prompts are long enough for their samples to share the first KV block (what makes the check
affordable on a CPU)."""

from __future__ import annotations

import json
from pathlib import Path

from transformers import AutoTokenizer

from conftest import compose_job
from specbatch.bench.sampling_bench import CHECKED, SENTENCES, write_copy_prompts
from specbatch.data.prompts import render
from specbatch.data.rows import SourceRow
from specbatch.run.folder import RunFolder

# vLLM's CPU KV block (vllm/platforms/cpu.py: 128 unless set): a prompt's full blocks are what prefix caching shares.
CPU_KV_BLOCK = 128


def test_each_checked_set_up_has_its_own_folder_and_the_self_draft_is_the_model(tmp_path: Path) -> None:
    data = write_copy_prompts(tmp_path / "prompts.jsonl")
    folders = set()
    for model, (extra, setups) in CHECKED.items():
        common = [f"model={model}", *data, "sampling=sampled", f"output_root={tmp_path}", *extra]
        for setup in (("spec=none",), *setups):
            job = compose_job([*common, *setup, "run_name=checked"])
            folders.add(RunFolder.for_job(job).root)
            if job.spec.method == "draft_model" and model == "smollm2_135m":
                assert job.spec.model == job.model.path
    assert len(folders) == sum(1 + len(setups) for _, setups in CHECKED.values())


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
