"""Rows and prompts from the packaged HumanEval; bad input fails before any model, naming what to fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specbatch.config import ConfigError
from specbatch.data import load_rows, template_fields
from specbatch.prompts import Prompt, check_lengths, load_tokenizer, render_prompts


def test_humaneval_edit_rows(job_factory) -> None:
    job = job_factory("max_samples=3")
    rows = load_rows(job.dataset, job.max_samples)
    assert [r.row_id for r in rows] == ["HumanEval/0", "HumanEval/1", "HumanEval/2"]
    assert "def has_close_elements" in rows[0].text and "comment above every line" in rows[0].text
    # The full solution is in the prompt: the answer can copy it, which is what n-gram drafting feeds on.
    assert "return False" in rows[0].text


def test_humaneval_completion_is_plain_text(job_factory) -> None:
    job = job_factory("dataset=humaneval", "max_samples=2")
    rows = load_rows(job.dataset, job.max_samples)
    prompts = render_prompts(rows, job.dataset, load_tokenizer(job.model))
    assert prompts[0].text == rows[0].text and prompts[0].text.startswith("from typing import List")
    assert "<|im_start|>" not in prompts[0].text


def test_chat_prompts_use_the_chat_template_and_system_prompt(job_factory) -> None:
    job = job_factory("max_samples=1", "dataset.system_prompt=You edit code.")
    tokenizer = load_tokenizer(job.model)
    [prompt] = render_prompts(load_rows(job.dataset, 1), job.dataset, tokenizer)
    assert prompt.text.startswith("<|im_start|>system\nYou edit code.<|im_end|>\n<|im_start|>user\n")
    assert prompt.text.endswith("<|im_start|>assistant\n")
    assert tokenizer.decode(prompt.token_ids) == prompt.text


def test_missing_column_lists_the_columns(job_factory) -> None:
    job = job_factory("dataset.template='{question}'")
    with pytest.raises(ConfigError) as err:
        load_rows(job.dataset, 1)
    message = str(err.value)
    assert "dataset.template refers to column(s) ['question']" in message
    assert "its columns are: task_id, prompt, entry_point, canonical_solution, test" in message


def test_missing_file_and_bad_template(job_factory, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="dataset.path=.*does not exist"):
        load_rows(job_factory(f"dataset.path={tmp_path}/nope.jsonl").dataset, 1)
    with pytest.raises(ConfigError, match="not a valid format string"):
        template_fields("{prompt")


def test_duplicate_ids_are_refused(job_factory, tmp_path: Path) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text("\n".join(json.dumps({"id": "same", "q": str(i)}) for i in range(2)))
    job = job_factory(f"dataset.path={data}", "dataset.id_column=id", "dataset.template='{q}'")
    with pytest.raises(ConfigError, match="dataset.id_column=id is not unique: 'same'"):
        load_rows(job.dataset, None)


def test_prompt_too_long_names_the_row() -> None:
    prompts = [Prompt("ok", "a", [1] * 10), Prompt("HumanEval/7", "b", [1] * 100)]
    check_lengths(prompts[:1], max_tokens=10, max_model_len=64)
    with pytest.raises(ConfigError) as err:
        check_lengths(prompts, max_tokens=10, max_model_len=64)
    assert "row 'HumanEval/7' has 100 prompt tokens + sampling.max_tokens=10 > model.max_model_len=64" in str(
        err.value
    )
