"""vLLM's verification and drafting modes as config (issue 54): spec.rejection_sample_method (standard, block),
spec.draft_sample_method and spec.use_heterogeneous_vocab reach speculative_config; what vLLM 0.32 would refuse, or
run as something else without a word, is refused first with one line naming the key; and a mode is part of the
run's identity and a row of its own in compare. Their greedy identity on real vLLM: tests/engine/test_methods_cpu.py.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from conftest import PROJECT_ROOT, compose_config, compose_job
from specbatch.analysis.report import find_runs, run_compare
from specbatch.analysis.tables import format_comparison
from specbatch.backends.dummy.dummy import DummyEngine
from specbatch.backends.llama_cpp.llama_server import spec_flags
from specbatch.backends.sglang.sglang_commands import sglang_argv
from specbatch.backends.vllm import methods as vllm_methods
from specbatch.backends.vllm.serve_commands import vllm_serve_command
from specbatch.backends.vllm.vllm_args import check_vllm_rules, llm_kwargs
from specbatch.common.machine import this_machine
from specbatch.config import ConfigError, run_folder_digest
from specbatch.config.preflight import preflight
from specbatch.engine import engine_fingerprint
from specbatch.pipeline import run_job

EAGLE3_GPU = ["model=llama31_8b_instruct", "spec=eagle3", "engine=gpu"]


@pytest.fixture
def on_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine as the vLLM backend's checks see it, with one GPU and vLLM's newer model runner allowed."""
    machine = this_machine()
    monkeypatch.setattr(vllm_methods, "this_machine", lambda: dataclasses.replace(machine, gpu_count=1))
    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)


def test_the_modes_reach_speculative_config_and_the_served_command(on_a_gpu: None) -> None:
    job = compose_job([*EAGLE3_GPU, "spec.rejection_sample_method=block", "spec.draft_sample_method=probabilistic"])
    speculative = llm_kwargs(job)["speculative_config"]
    assert speculative["rejection_sample_method"] == "block"
    assert speculative["draft_sample_method"] == "probabilistic"
    check_vllm_rules(job)
    vllm_methods.check_method(job)
    assert '"rejection_sample_method": "block"' in vllm_serve_command(job, module=False)
    # Unset, vLLM's defaults run, and nothing is written for them.
    plain = llm_kwargs(compose_job(EAGLE3_GPU))["speculative_config"]
    assert "rejection_sample_method" not in plain and "use_heterogeneous_vocab" not in plain


def test_only_ways_to_verify_are_values() -> None:
    # vLLM's third value, synthetic, simulates acceptance without looking at the tokens: not a way to verify.
    with pytest.raises((HydraException, OmegaConfBaseException)) as err:
        compose_config(["spec=ngram", "spec.rejection_sample_method=synthetic"])
    assert "Invalid value 'synthetic', expected one of [standard, block]" in str(err.value.__cause__ or err.value)


def test_a_mode_is_part_of_the_runs_identity() -> None:
    digests = {
        run_folder_digest(compose_job(["spec=ngram", *extra]))
        for extra in ([], ["spec.rejection_sample_method=block"], ["spec.rejection_sample_method=standard"])
    }
    assert len(digests) == 3


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        (["spec=none", "spec.rejection_sample_method=block"], "spec.rejection_sample_method is not an option of "),
        (["spec=ngram", "spec.use_heterogeneous_vocab=true"], "it belongs to draft_model"),
        (
            ["spec=draft_model", "spec.use_heterogeneous_vocab=true", "spec.draft_sample_method=probabilistic"],
            "spec.use_heterogeneous_vocab=true with spec.draft_sample_method=probabilistic: a draft with another "
            "tokenizer proposes greedy tokens only",
        ),
    ],
)
def test_what_the_config_alone_rules_out_is_refused_at_compose(overrides: list[str], says: str) -> None:
    with pytest.raises(ConfigError) as err:
        compose_job(overrides)
    assert says in str(err.value)
    assert "\n" not in str(err.value).strip()


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        (["spec=suffix"], "spec.rejection_sample_method=block with spec=suffix: vLLM 0.32 runs that on its older"),
        (
            [*EAGLE3_GPU, "spec.parallel_drafting=true"],
            "with spec.parallel_drafting=true with EAGLE heads: vLLM 0.32 runs that on its older",
        ),
        (
            ["model=tiny_llama", "spec=draft_model", "spec.use_heterogeneous_vocab=true"],
            "with spec.use_heterogeneous_vocab=true: vLLM 0.32 runs that on its older model runner, which verifies",
        ),
    ],
)
def test_block_verification_is_refused_where_vllm_would_verify_token_by_token(overrides: list[str], says: str) -> None:
    # A rule of the set-up on any machine: refused as the config is composed (vLLM's rules run then).
    with pytest.raises(ConfigError) as err:
        compose_job([*overrides, "spec.rejection_sample_method=block"])
    assert says in str(err.value)


def test_block_verification_is_refused_on_a_machine_without_vllms_newer_runner(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """vLLM 0.32 verifies blocks in its V2 model runner only (Triton kernels); its CPU build runs the V1 runner,
    whose rejection sampler runs block as standard without a word."""
    job = compose_job(["spec=ngram", "spec.rejection_sample_method=block"])
    machine = this_machine()
    monkeypatch.setattr(vllm_methods, "this_machine", lambda: dataclasses.replace(machine, gpu_count=0))
    with pytest.raises(ConfigError, match=r"rejection_sample_method=block: .* this machine has no GPU"):
        vllm_methods.check_method(job)
    monkeypatch.setattr(vllm_methods, "this_machine", lambda: dataclasses.replace(machine, gpu_count=1))
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "0")
    with pytest.raises(ConfigError, match="VLLM_USE_V2_MODEL_RUNNER=0 forces the older one"):
        vllm_methods.check_method(job)
    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER")
    vllm_methods.check_method(job)
    # standard runs everywhere.
    vllm_methods.check_method(compose_job(["spec=ngram", "spec.rejection_sample_method=standard"]))


def test_engines_without_the_modes_refuse_them() -> None:
    with pytest.raises(ConfigError, match="SGLang verifies drafts token by token and has no block verification"):
        sglang_argv(compose_job([*EAGLE3_GPU, "spec.rejection_sample_method=block"]))
    with pytest.raises(ConfigError, match="spec.rejection_sample_method=block is vLLM's: llama-server"):
        spec_flags(compose_job(["spec=ngram", "spec.rejection_sample_method=block", "engine.backend=llama_cpp"]))


@pytest.mark.parametrize(
    "knob",
    ["spec.rejection_sample_method=standard", "spec.draft_sample_method=greedy", "spec.use_heterogeneous_vocab=false"],
)
def test_llama_cpp_refuses_the_modes_even_at_vllms_defaults(knob: str) -> None:
    """docs/methods.md says every one of these knobs is refused on llama.cpp, which has no such option: vLLM's
    default value too (llama-server keeps the drafts equal to a sample of the target, which is not vLLM's standard
    rejection sampler under sampling), so a run never records a verification it did not have."""
    spec = "spec=draft_model" if "draft" in knob or "vocab" in knob else "spec=ngram"
    name = knob.split("=")[0]
    with pytest.raises(ConfigError, match=rf"{re.escape(knob)} is vLLM's: .* drop {re.escape(name)} on"):
        spec_flags(compose_job([spec, knob, "engine.backend=llama_cpp"]))
    docs = " ".join((PROJECT_ROOT / "docs" / "methods.md").read_text().split())
    assert "any value of them on llama.cpp" in docs, "docs/methods.md no longer says llama.cpp refuses every value"
    # Unset, the method runs there.
    assert spec_flags(compose_job(["spec=ngram", "engine.backend=llama_cpp"]))


def test_a_heterogeneous_draft_passes_the_vocabulary_check(tmp_path: Path) -> None:
    target, draft = tmp_path / "target", tmp_path / "draft"
    for folder, vocab in ((target, 1000), (draft, 1200)):
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({"vocab_size": vocab, "max_position_embeddings": 4096}))
    common = [f"model.path={target}", "model.embedded=null", "spec=draft_model", f"spec.model={draft}"]
    with pytest.raises(ConfigError, match="or set spec.use_heterogeneous_vocab=true"):
        preflight(compose_job(common))
    preflight(compose_job([*common, "spec.use_heterogeneous_vocab=true"]))


def test_compare_shows_block_verification_as_a_set_up_of_its_own(local_job_factory, tmp_path: Path, on_a_gpu) -> None:
    common = ["tracking.enabled=false", "sampling.max_tokens=8"]
    jobs = [
        local_job_factory(*common, rows=4, spec="none"),
        local_job_factory(*common, rows=4, spec="ngram"),
        local_job_factory(*common, "spec.rejection_sample_method=block", rows=4, spec="ngram"),
    ]
    folders = [run_job(job, engine=DummyEngine(engine_fingerprint(job), k=job.spec.k)).folder.root for job in jobs]
    comparison = run_compare(find_runs(folders), tmp_path / "comparison", log_to_mlflow=False).comparison
    captions = sorted(row.caption for row in comparison.rows)
    assert captions == ["ngram k=3", "ngram k=3 (block verification)", "none"]
    assert all(row.repeats == 1 for row in comparison.rows)
    assert "| ngram (block verification) | 3 |" in format_comparison(comparison)
    saved = json.loads((tmp_path / "comparison" / "comparison.json").read_text())
    assert sorted(str(row["variant"]) for row in saved["rows"]) == ["None", "None", "block verification"]
