"""Every model-based method for real on CPU, through jobs/generate.py, on the tiny random family (assets/tiny.py).

Greedy in float32, each method must reproduce spec=none token for token, and a draft that is an exact copy of
the target must have every drafted token accepted. (n-gram and suffix run on the embedded model in
test_generate_cpu.py.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import compose_job, run_generate
from specbatch.engine.spec_metrics import accepted_per_position_from_histogram
from specbatch.run.folder import RunFolder

pytestmark = pytest.mark.slow

N_PROMPTS = 3
MAX_TOKENS = 32

# name → (model preset, overrides). The tiny family is built on first use by the job itself (model.embedded).
RUNS = {
    "none": ("tiny_llama", ["spec=none"]),
    "draft_model": ("tiny_llama", ["spec=draft_model"]),
    "draft_copy": ("tiny_llama", ["spec=draft_model", "spec.model=${specbatch_cache:}/tiny/draft_copy"]),
    "eagle": ("tiny_llama", ["spec=eagle"]),
    "eagle3": ("tiny_llama", ["spec=eagle3"]),
    "mimo_none": ("tiny_mimo", ["spec=none"]),
    "mtp": ("tiny_mimo", ["spec=mtp"]),
}
BASELINE = {"draft_model": "none", "draft_copy": "none", "eagle": "none", "eagle3": "none", "mtp": "mimo_none"}


def overrides(root: Path, name: str) -> list[str]:
    model, extra = RUNS[name]
    return [
        f"output_root={root}",
        f"model={model}",
        *extra,
        f"run_name={name}",
        "dataset=humaneval",
        f"max_samples={N_PROMPTS}",
        f"sampling.max_tokens={MAX_TOKENS}",
        "tracking=off",
    ]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    root = tmp_path_factory.mktemp("methods")
    out: dict[str, dict] = {}
    for name in RUNS:
        result = run_generate(overrides(root, name))
        assert result.returncode == 0, f"{name}: {result.stderr[-4000:]}"
        layout = RunFolder.for_job(compose_job(overrides(root, name)))
        out[name] = {
            "rows": {r["row_id"]: r for r in pq.read_table(layout.part_path(0)).to_pylist()},
            "summary": json.loads(layout.stats_path.read_text()),
        }
    return out


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


def test_a_copy_of_the_target_as_draft_is_always_accepted(runs: dict[str, dict]) -> None:
    summary = runs["draft_copy"]["summary"]
    assert summary["accepted_tokens"] == summary["draft_tokens"] > 0
    assert summary["acceptance_rate_per_position"] == [1.0] * summary["num_speculative_tokens"]
    assert summary["mean_acceptance_length"] == 1 + summary["num_speculative_tokens"]
