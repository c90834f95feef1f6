"""Every model-based method for real on CPU, through jobs/generate.py, on the tiny random family (assets/tiny.py).

Greedy in float32, each method must reproduce spec=none token for token, and a draft that is an exact copy of
the target must have every drafted token accepted. So must vLLM's verification and drafting modes that its CPU
build runs (issue 54): probabilistic drafts, and a draft declared to have another vocabulary (vLLM then maps its
tokens to the target's by their text: with a copy of the target every drafted token must still be accepted). Block
verification does not run on the CPU build (backends/vllm/methods.py says why; test_verification_modes.py). (n-gram
and suffix run on the embedded model in test_generate_cpu.py; DSpark cannot run on vLLM's CPU build: README "Block
drafters".) Each run records the settings vLLM resolved that change acceptance.
"""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from conftest import run_generate
from specbatch.engine.spec_metrics import accepted_per_position_from_histogram
from specbatch.run.folder import RunFolder
from specbatch.run.multirun import sweep_jobs

pytestmark = pytest.mark.slow

N_PROMPTS = 3
MAX_TOKENS = 32

# One multirun (`-m`) over every method of both models: its jobs run one after another in one process, as a user's
# sweep does, which saves a process start (~10 s of imports here, twice that on slower CPUs) per method. A sweep
# crosses the values it is given, so each (model, spec) pair is a preset of the test's own config folder (case/<name>,
# Hydra's experiment presets: `+case=<name>` overrides both groups). Name → (model, spec choice); the tiny family is
# built on first use by the job itself (model.embedded).
CASES = {
    "none": ("tiny_llama", "none"),
    "draft_model": ("tiny_llama", "draft_model"),
    "draft_copy": ("tiny_llama", "draft_copy"),
    "draft_probabilistic": ("tiny_llama", "draft_probabilistic"),
    "draft_copy_heterogeneous": ("tiny_llama", "draft_copy_heterogeneous"),
    "eagle": ("tiny_llama", "eagle"),
    "eagle3": ("tiny_llama", "eagle3"),
    "dflash": ("tiny_llama", "dflash"),
    "medusa": ("tiny_llama", "medusa"),
    "mimo_none": ("tiny_mimo", "none"),
    "mtp": ("tiny_mimo", "mtp"),
}
BASELINE = {
    "draft_model": "none",
    "draft_copy": "none",
    "draft_probabilistic": "none",
    "draft_copy_heterogeneous": "none",
    "eagle": "none",
    "eagle3": "none",
    "dflash": "none",
    "medusa": "none",
    "mtp": "mimo_none",
}
# spec=draft_copy: a preset of the test's own config folder (--config-dir, as users add theirs): draft_model with
# an exact copy of the target as the draft.
DRAFT_COPY_PRESET = """defaults:
  - draft_model
model: ${specbatch_cache:}/tiny/draft_copy
"""
# vLLM's modes as presets of the same folder (a preset named other than its method has no conf/model_spec pairing:
# it names its draft).
MODE_PRESETS = {
    "draft_probabilistic": (
        "defaults:\n  - draft_model\nmodel: ${specbatch_cache:}/tiny/draft\ndraft_sample_method: probabilistic\n"
    ),
    "draft_copy_heterogeneous": "defaults:\n  - draft_copy\nuse_heterogeneous_vocab: true\n",
}
CASE_PRESET = """# @package _global_
defaults:
  - override /model: {model}
  - override /spec: {spec}
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    root = tmp_path_factory.mktemp("methods")
    (root / "conf" / "spec").mkdir(parents=True)
    (root / "conf" / "spec" / "draft_copy.yaml").write_text(DRAFT_COPY_PRESET)
    for name, preset in MODE_PRESETS.items():
        (root / "conf" / "spec" / f"{name}.yaml").write_text(preset)
    (root / "conf" / "case").mkdir()
    for name, (model, spec) in CASES.items():
        (root / "conf" / "case" / f"{name}.yaml").write_text(CASE_PRESET.format(model=model, spec=spec))
    sweep_dir = root / "sweep"
    result = run_generate(
        [
            "--config-dir",
            str(root / "conf"),
            "-m",
            f"+case={','.join(CASES)}",
            f"output_root={root}",
            f"hydra.sweep.dir={sweep_dir}",
            "dataset=humaneval",
            f"max_samples={N_PROMPTS}",
            f"sampling.max_tokens={MAX_TOKENS}",
            "tracking=off",
            # Nothing here reads a timing: no warm-up request per engine (11 engines).
            "engine.warmup=false",
        ]
    )
    assert result.returncode == 0, result.stderr[-4000:]
    # Hydra runs a sweep's jobs in the order of the swept values; each job names its run folder.
    jobs = sweep_jobs(sweep_dir)
    assert [failed for _, failed in jobs] == [None] * len(CASES)
    out: dict[str, dict] = {}
    for name, (folder, _) in zip(CASES, jobs, strict=True):
        layout = RunFolder(folder)
        out[name] = {
            "config": json.loads(layout.run_json.read_text())["config"],
            "rows": {r["row_id"]: r for r in pq.read_table(layout.part_path(0)).to_pylist()},
            "summary": json.loads(layout.stats_path.read_text()),
        }
    return out


def test_each_sweep_job_ran_its_own_model_method_and_draft(runs: dict[str, dict]) -> None:
    for name, (model, _) in CASES.items():
        config = runs[name]["config"]
        method = "draft_model" if name.startswith("draft_") else name.removeprefix("mimo_")
        assert config["spec"]["method"] == method, name
        assert config["model"]["name"] == model.replace("_", "-"), name
    assert runs["draft_copy"]["config"]["spec"]["model"].endswith("/tiny/draft_copy")
    assert runs["draft_model"]["config"]["spec"]["model"].endswith("/tiny/draft")
    assert runs["draft_probabilistic"]["config"]["spec"]["draft_sample_method"] == "probabilistic"
    assert runs["draft_copy_heterogeneous"]["config"]["spec"]["use_heterogeneous_vocab"] is True


@pytest.mark.parametrize("name", sorted(BASELINE))
def test_method_writes_rows_with_spec_figures_matching_the_counters(runs: dict[str, dict], name: str) -> None:
    rows, summary = list(runs[name]["rows"].values()), runs[name]["summary"]
    k = summary["num_speculative_tokens"]
    assert len(rows) == N_PROMPTS
    assert all(r["num_speculative_tokens"] == k and len(r["acceptance_histogram"]) == k + 1 for r in rows)
    drafts = sum(r["spec_steps"] for r in rows)
    assert drafts == summary["drafts"] > 0
    assert sum(r["accepted_tokens"] for r in rows) == summary["accepted_tokens"]
    assert sum(r["draft_tokens"] for r in rows) == summary["draft_tokens"]
    positions = [accepted_per_position_from_histogram(r["acceptance_histogram"]) for r in rows]
    per_position = [sum(col) for col in zip(*positions, strict=True)]
    assert summary["acceptance_rate_per_position"] == pytest.approx([a / drafts for a in per_position])
    assert summary["mean_acceptance_length"] == pytest.approx(1 + summary["accepted_tokens"] / drafts)


@pytest.mark.parametrize("name", sorted(BASELINE))
def test_greedy_float32_is_token_identical_to_no_speculation(runs: dict[str, dict], name: str) -> None:
    base, spec = runs[BASELINE[name]]["rows"], runs[name]["rows"]
    assert set(spec) == set(base)
    for row_id, row in base.items():
        assert spec[row_id]["completion_token_ids"] == row["completion_token_ids"], f"{name} differs on {row_id}"


@pytest.mark.parametrize("name", ["draft_copy", "draft_copy_heterogeneous"])
def test_a_copy_of_the_target_as_draft_is_always_accepted(runs: dict[str, dict], name: str) -> None:
    summary = runs[name]["summary"]
    assert summary["accepted_tokens"] == summary["draft_tokens"] > 0
    assert summary["acceptance_rate_per_position"] == [1.0] * summary["num_speculative_tokens"]
    assert summary["mean_acceptance_length"] == 1 + summary["num_speculative_tokens"]


def test_each_run_records_the_settings_vllm_resolved_that_change_acceptance(runs: dict[str, dict]) -> None:
    settings = {name: run["summary"]["acceptance_settings"] for name, run in runs.items()}
    for name, each in settings.items():
        # vLLM's CPU build: its own attention backend, the older model runner (no Triton), no structured output.
        assert each["attention_backend"] == "CPU_ATTN" and each["model_runner"] == "v1", name
        assert each["structured_outputs"] == "off"
        assert isinstance(each["prefix_caching"], bool) and isinstance(each["async_scheduling"], bool), name
    # A draft's context is capped at the target's (model=tiny_llama: max_model_len 1024); none has no draft.
    assert settings["dflash"]["draft_max_model_len"] == settings["draft_model"]["draft_max_model_len"] == 1024
    assert settings["none"]["draft_max_model_len"] is None
    # DFlash's block: vLLM drafts the k=3 of the tiny draft's block of 4 in one pass per step.
    assert runs["dflash"]["summary"]["num_speculative_tokens"] == 3
    # Medusa: one head per drafted token, the stand-in's 3 heads all drafting, each step.
    assert runs["medusa"]["summary"]["num_speculative_tokens"] == 3
