"""GPU presets as vLLM 0.32 takes them: PARD with parallel drafting, NVIDIA Dynamo's deployment reproduced exactly,
parallel drafting's own rules, and suffix decoding's zero values (composed from the real conf/, nothing loaded)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import compose_job
from specbatch.backends.sglang.sglang_commands import sglang_argv
from specbatch.backends.vllm.serve_commands import dynamo_argv
from specbatch.backends.vllm.vllm_args import llm_kwargs
from specbatch.config import ConfigError
from specbatch.config.preflight import preflight

# The speculative_config of Dynamo's Llama-3.1-8B-Instruct + EAGLE3 deployment (its vLLM speculative-decoding guide).
DYNAMO_SPECULATIVE_CONFIG = {
    "method": "eagle3",
    "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
    "num_speculative_tokens": 2,
    "draft_tensor_parallel_size": 1,
}


def checkpoint(folder: Path, **config: object) -> str:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


def test_the_dynamo_preset_composes_to_dynamos_dict() -> None:
    job = compose_job(["deploy=dynamo_llama31_eagle3"])
    kwargs = llm_kwargs(job)
    assert kwargs["speculative_config"] == DYNAMO_SPECULATIVE_CONFIG
    assert kwargs["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert kwargs["enforce_eager"] is True and kwargs["gpu_memory_utilization"] == 0.8
    argv = dynamo_argv(job)
    assert json.loads(argv[argv.index("--speculative_config") + 1]) == DYNAMO_SPECULATIVE_CONFIG
    assert "--enforce-eager" in argv and argv[argv.index("--gpu-memory-utilization") + 1] == "0.8"


def test_the_pard_preset_drafts_in_parallel_as_vllms_docs_run_it() -> None:
    kwargs = llm_kwargs(compose_job(["model=llama31_8b_instruct", "spec=draft_model", "engine=gpu"]))
    assert kwargs["speculative_config"] == {
        "method": "draft_model",
        "num_speculative_tokens": 12,
        "model": "amd/PARD-Llama-3.2-1B",
        "parallel_drafting": True,
    }
    # PARD as an ordinary draft, one token per pass.
    plain = compose_job(
        [
            "model=llama31_8b_instruct",
            "spec=draft_model",
            "spec.parallel_drafting=null",
            "spec.num_speculative_tokens=3",
        ]
    )
    assert "parallel_drafting" not in llm_kwargs(plain)["speculative_config"]
    with pytest.raises(ConfigError, match="spec.parallel_drafting=true: SGLang's STANDALONE"):
        sglang_argv(compose_job(["model=llama31_8b_instruct", "spec=draft_model"]))


@pytest.mark.parametrize("method", ["draft_model", "eagle", "eagle3"])
def test_parallel_drafting_is_accepted_for_drafters_trained_for_it(tmp_path: Path, method: str) -> None:
    target = checkpoint(tmp_path / "target", vocab_size=1000)
    head = checkpoint(tmp_path / "head", vocab_size=1000, pard_token=999)
    job = compose_job(
        [f"model.path={target}", "model.embedded=null", f"spec={method}", f"spec.model={head}"]
        + ["spec.parallel_drafting=true", "spec.draft_tensor_parallel_size=1"]
    )
    preflight(job)
    assert llm_kwargs(job)["speculative_config"]["parallel_drafting"] is True


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["spec=ngram", "spec.parallel_drafting=true"],
            "spec.parallel_drafting is not an option of spec.method=ngram",
        ),
        (["spec=mtp", "spec.parallel_drafting=true"], "spec.parallel_drafting is not an option of spec.method=mtp"),
        (
            ["model=llama31_8b_instruct", "model.tensor_parallel_size=4", "spec=eagle3"]
            + ["spec.parallel_drafting=true", "spec.draft_tensor_parallel_size=1"],
            "spec.draft_tensor_parallel_size=1 with spec.parallel_drafting=true and model.tensor_parallel_size=4: "
            "vLLM 0.32 runs parallel drafting on its older model runner",
        ),
    ],
)
def test_parallel_drafting_is_refused_where_vllm_cannot_run_it(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        compose_job(overrides)


def test_parallel_drafting_with_a_drafter_not_trained_for_it_is_refused_before_loading(tmp_path: Path) -> None:
    target = checkpoint(tmp_path / "target", vocab_size=1000)
    draft = checkpoint(tmp_path / "draft", vocab_size=1000)
    job = compose_job(
        [f"model.path={target}", "model.embedded=null", "spec=draft_model", f"spec.model={draft}"]
        + ["spec.parallel_drafting=true"]
    )
    with pytest.raises(
        ConfigError, match=r"spec.parallel_drafting=true but the config.json of spec.model=.*pard_token"
    ):
        preflight(job)
