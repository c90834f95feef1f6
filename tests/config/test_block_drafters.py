"""DFlash and DSpark (block drafters): their GPU presets as vLLM's own tests run them, and every refusal before
loading names its key (composed from the real conf/; checkpoints are config.json files in tmp folders)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from conftest import compose_job
from specbatch.backends.vllm import methods as vllm_methods
from specbatch.common.machine import this_machine
from specbatch.config import ConfigError
from specbatch.config.preflight import preflight
from specbatch.serving.vllm_args import llm_kwargs

TARGET = {"vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 4}
DFLASH = {
    "architectures": ["DFlashDraftModel"],
    "vocab_size": 1000,
    "hidden_size": 64,
    "block_size": 16,
    "dflash_config": {"mask_token_id": 999, "target_layer_ids": [0, 1, 2]},
}
DSPARK = {"architectures": ["Qwen3DSparkModel"], "vocab_size": 1000, "block_size": 7, "dspark_noise_token_id": 999}


def checkpoint(folder: Path, config: dict[str, Any]) -> str:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


def job_with(tmp_path: Path, method: str, draft: dict[str, Any], *extra: str, target: dict[str, Any] = TARGET):
    target_dir = checkpoint(tmp_path / "target", target)
    draft_dir = checkpoint(tmp_path / "draft", draft)
    return compose_job(
        [f"model.path={target_dir}", "model.embedded=null", f"spec={method}", f"spec.model={draft_dir}", *extra]
    )


@pytest.fixture
def on_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine as preflight sees it, with one GPU (DSpark's runner check)."""
    machine = this_machine()
    monkeypatch.setattr(vllm_methods, "this_machine", lambda: dataclasses.replace(machine, gpu_count=1))
    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)


def test_the_gpu_presets_are_vllms_own_test_set_ups() -> None:
    dflash = llm_kwargs(compose_job(["model=qwen3_8b", "spec=dflash", "engine=gpu"]))
    assert dflash["model"] == "Qwen/Qwen3-8B" and dflash["max_model_len"] == 4096
    assert dflash["speculative_config"] == {
        "method": "dflash",
        "num_speculative_tokens": 16,
        "model": "z-lab/Qwen3-8B-DFlash-b16",
    }
    dspark = llm_kwargs(compose_job(["model=qwen3_4b_fp8", "spec=dspark", "engine=gpu"]))
    assert dspark["model"] == "Qwen/Qwen3-4B-FP8"
    assert dspark["speculative_config"] == {
        "method": "dspark",
        "num_speculative_tokens": 7,
        "model": "deepseek-ai/dspark_qwen3_4b_block7",
    }


def test_a_fitting_dflash_draft_passes_and_its_knobs_reach_vllm(tmp_path: Path) -> None:
    job = job_with(tmp_path, "dflash", DFLASH, "spec.num_speculative_tokens=16", "spec.draft_tensor_parallel_size=1")
    preflight(job)
    assert llm_kwargs(job)["speculative_config"]["draft_tensor_parallel_size"] == 1


def test_a_fitting_dspark_draft_passes_on_a_gpu(tmp_path: Path, on_a_gpu: None) -> None:
    # A larger input vocabulary than the target's is DSpark's own (embeddings for its noise token), not a mismatch.
    job = job_with(tmp_path, "dspark", {**DSPARK, "vocab_size": 1001}, "spec.dspark_draft_topk=8")
    preflight(job)
    assert llm_kwargs(job)["speculative_config"]["dspark_draft_topk"] == 8


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["spec=dflash", "spec.parallel_drafting=true"],
            "spec.parallel_drafting is not an option of spec.method=dflash",
        ),
        (["spec=dspark", "spec.parallel_drafting=true"], "it always drafts its whole block in one pass"),
        (["spec=dflash", "spec.dspark_draft_topk=4"], "spec.dspark_draft_topk is not an option of spec.method=dflash"),
        (["spec=dspark", "spec.dspark_draft_topk=0"], "spec.dspark_draft_topk=0 must be 1 or more"),
        (
            ["spec=dspark", "spec.dspark_draft_topk=4", "spec.draft_tensor_parallel_size=2"],
            "spec.dspark_draft_topk=4 needs the draft on one GPU, but spec.draft_tensor_parallel_size=2",
        ),
        (["spec=dflash", "spec.prompt_lookup_min=2"], "spec.prompt_lookup_min is not an option of spec.method=dflash"),
        (["model=tiny_llama", "spec=dflash", "spec.k_schedule=[[1,4,3],[5,256,0]]"], None),
    ],
)
def test_config_mistakes_are_refused_at_compose_naming_the_key(overrides: list[str], message: str | None) -> None:
    if message is None:
        # Both follow a k schedule as vLLM's other drafters do; nothing to refuse.
        assert compose_job([*overrides, "engine.max_num_seqs=256"]).spec.k == 3
        return
    with pytest.raises(ConfigError, match=message):
        compose_job(overrides)


@pytest.mark.parametrize(
    ("method", "draft", "extra", "message"),
    [
        (
            "dflash",
            {**DFLASH, "dflash_config": {"target_layer_ids": [0, 1, 2]}},
            [],
            r"spec=dflash: the config.json of spec.model=.* names no token for the slots of its block "
            r"\(dflash_config.mask_token_id",
        ),
        (
            "dflash",
            {**DFLASH, "block_size": 4},
            [],
            r"spec.num_speculative_tokens=15 is more than the block of 4 .* set spec.num_speculative_tokens=4 or less",
        ),
        (
            "dflash",
            {**DFLASH, "dflash_config": {"mask_token_id": 999}},
            [],
            r"spec=dflash: the config.json of spec.model=.* names no dflash_config.target_layer_ids",
        ),
        (
            "dflash",
            {**DFLASH, "dflash_config": {"mask_token_id": 999, "target_layer_ids": [1, 5, 30]}},
            [],
            r"reads target layers \[1, 5, 30\], but model.path=.* has 4 layers \(ids 0..3, each once\)",
        ),
        (
            "dflash",
            {**DFLASH, "dflash_config": {"mask_token_id": 999, "target_layer_ids": [1, 1, 2]}},
            [],
            r"reads target layers \[1, 1, 2\]",
        ),
        (
            "dflash",
            {**DFLASH, "target_hidden_size": 128},
            [],
            r"expects target hidden states of width 128 \(target_hidden_size\), but model.path=.* has hidden_size=64",
        ),
        (
            "dflash",
            {**DFLASH, "vocab_size": 32000},
            [],
            r"spec.model=.* has vocab_size=32000 but model.path=.* has vocab_size=1000: a DFlash draft must share",
        ),
        (
            "dspark",
            {**DSPARK, "architectures": ["LlamaForCausalLM"]},
            [],
            r"spec=dspark: the config.json of spec.model=.* has architectures=\['LlamaForCausalLM'\], none of "
            r"Qwen3DSparkModel.*DeepSeek-V4",
        ),
        (
            "dspark",
            {**DSPARK, "architectures": ["Gemma4DSparkModel"]},
            ["spec.dspark_draft_topk=8"],
            r"spec.dspark_draft_topk=8: vLLM 0.32 has it only for Qwen3DSparkModel and Qwen3OmniDSparkModel",
        ),
        (
            "dspark",
            {**DSPARK, "vocab_size": 500},
            [],
            r"spec=dspark: the config.json of spec.model=.* has vocab_size=500, below the 1000 of model.path=",
        ),
        (
            "dspark",
            DSPARK,
            ["spec.num_speculative_tokens=9"],
            r"spec.num_speculative_tokens=9 is more than the block of 7 the dspark draft was trained on",
        ),
    ],
)
def test_a_draft_that_does_not_fit_is_refused_before_loading(
    tmp_path: Path, on_a_gpu: None, method: str, draft: dict[str, Any], extra: list[str], message: str
) -> None:
    job = job_with(tmp_path, method, draft, *extra)
    with pytest.raises(ConfigError, match=message):
        preflight(job)


def test_dspark_is_refused_where_vllm_has_no_model_runner_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    machine = this_machine()
    cpu_only = dataclasses.replace(machine, gpu_count=0)
    monkeypatch.setattr(vllm_methods, "this_machine", lambda: cpu_only)
    job = job_with(tmp_path, "dspark", DSPARK)
    # A vLLM 0.32 rule: vLLM's table of methods checks it.
    with pytest.raises(ConfigError, match=r"spec=dspark: .* this machine has no GPU .*choose spec=dflash"):
        vllm_methods.check_method(job)
    gpu = dataclasses.replace(machine, gpu_count=1)
    monkeypatch.setattr(vllm_methods, "this_machine", lambda: gpu)
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "0")
    with pytest.raises(ConfigError, match="VLLM_USE_V2_MODEL_RUNNER=0 forces the older one"):
        vllm_methods.check_method(job)


@pytest.mark.parametrize(
    ("method", "damaged", "text", "says"),
    [
        ("dflash", "draft", "{not json", "is not JSON (Expecting property name"),
        ("dflash", "draft", json.dumps([DFLASH]), "holds a list where an object of settings belongs"),
        ("dflash", "draft", json.dumps({**DFLASH, "dflash_config": "999"}), 'has dflash_config="999": a string where'),
        ("eagle3", "draft", json.dumps({"vocab_size": 1000, "text_config": [1]}), "has text_config=[1]: a list where"),
        ("mtp", "target", json.dumps({**TARGET, "num_nextn_predict_layers": "two"}), 'layers="two": a string'),
    ],
)
def test_a_damaged_checkpoint_config_is_one_line_naming_the_file(
    tmp_path: Path, method: str, damaged: str, text: str, says: str
) -> None:
    # Every check reads config.json through one reader: a file that is not a Hugging Face config is refused there,
    # before any model loads, instead of a JSONDecodeError or AttributeError from whichever check read it first.
    target, draft = checkpoint(tmp_path / "target", TARGET), checkpoint(tmp_path / "draft", DFLASH)
    drafting = [] if method == "mtp" else [f"spec.model={draft}"]
    job = compose_job([f"model.path={target}", "model.embedded=null", f"spec={method}", *drafting])
    key = {"draft": "spec.model", "target": "model.path"}[damaged]
    (tmp_path / damaged / "config.json").write_text(text)
    with pytest.raises(ConfigError) as err:
        preflight(job)
    message = str(err.value)
    assert message.startswith(f"{key}={tmp_path / damaged}: its config.json ({tmp_path / damaged / 'config.json'})")
    assert says in message and "\n" not in message
    assert f"restore the checkpoint's own config.json in {tmp_path / damaged}, or point {key} at another" in message
