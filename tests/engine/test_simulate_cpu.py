"""spec=simulate on real vLLM (CPU build): the target alone at n-gram's own measured profile gives n-gram's acceptance.

n-gram k=3 runs on the embedded model; spec=simulate then runs at that run's folder (its profile: marginal rates and
the share of steps that drafted), through vLLM's synthetic rejection sampler and the free carrier drafter, with the
CPU build's rejection kernels extended to synthetic mode (backends/vllm/vllm_cpu_fixes.py). Both with
sampling.ignore_eos=true, so both runs have the same lengths and the same number of steps to draft at. Timings are
jobs/bench.py --simulate's (a benchmark, not this test): here the acceptance, the rows and how compare shows it.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import run_generate
from specbatch.analysis.lossless.run_check import check_run
from specbatch.analysis.run_data import load_run
from specbatch.common.errors import ConfigError
from specbatch.run.folder import shard_folders
from specbatch.run.records.profile_file import read_profile
from specbatch.run.status_merge import finished_summary

pytestmark = pytest.mark.slow

ROWS, MAX_TOKENS = 16, 192
COMMON = [
    "model.dtype=float32",
    f"max_samples={ROWS}",
    f"sampling.max_tokens={MAX_TOKENS}",
    "sampling.ignore_eos=true",
    "tracking=off",
    "engine.warmup=false",
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("simulate")
    found: dict[str, Path] = {}
    for name, spec in (("real", ["spec=ngram"]), ("simulated", ["spec=simulate"])):
        if name == "simulated":
            spec.append(f"spec.profile={found['real']}")
        result = run_generate([*spec, f"output_root={root}", *COMMON])
        assert result.returncode == 0, result.stderr[-4000:]
        [found[name]] = [p for p in root.glob("runs/*/*/*") if p not in found.values()]
    return found


def test_it_runs_at_the_profiles_acceptance(runs: dict[str, Path]) -> None:
    real, simulated = (finished_summary(runs[name]) for name in ("real", "simulated"))
    [shard] = shard_folders(runs["real"])
    profile = read_profile(shard.profile_path)
    assert profile is not None and 0 < profile["specbatch"]["draft_coverage"] < 1  # n-gram finds no match sometimes
    assert real.mean_acceptance_length and simulated.mean_acceptance_length
    assert simulated.mean_acceptance_length == pytest.approx(real.mean_acceptance_length, rel=0.03)
    # Per position too, as vLLM counts it (accepted up to there, over drafting steps), and about as many steps drafted.
    assert simulated.acceptance_rate_per_position == pytest.approx(real.acceptance_rate_per_position, abs=0.05)
    assert simulated.drafts == pytest.approx(real.drafts, rel=0.1)
    # Equal lengths: every row of both runs is max_tokens long.
    for name in runs:
        assert {len(ids) for ids in rows(runs[name])["completion_token_ids"]} == {MAX_TOKENS}, name


def test_compare_names_it_by_its_profiles_run_and_the_referee_refuses_it(runs: dict[str, Path]) -> None:
    # Its rows are never compared token for token nor recommended: tests/analysis/test_compare.py.
    run = load_run(runs["simulated"])
    assert run.simulated and not load_run(runs["real"]).simulated
    coverage = read_profile(shard_folders(runs["real"])[0].profile_path)["specbatch"]["draft_coverage"]
    assert run.variant == f"simulated at the acceptance of {runs['real'].name} (drafts at {coverage:.0%} of steps)"
    assert set(rows(runs["simulated"])["method"]) == {"simulate"}
    with pytest.raises(ConfigError, match="at a given acceptance: its text is not a real output"):
        check_run(runs["simulated"])


def rows(root: Path) -> dict[str, list]:
    [shard] = shard_folders(root)
    return pq.read_table(shard.parts(), columns=["method", "completion_token_ids"]).to_pydict()
