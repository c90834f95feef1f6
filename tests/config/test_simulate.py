"""spec=simulate's config (methods/simulate.py): where its acceptance comes from (rates, or a profile file or run
folder, ours or ModelOpt's), vLLM's rules on the rates refused first, equal lengths, and what reaches vLLM."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.conftest import compose_job

from specbatch.backends.vllm.simulate_carrier import CLASS_PATH, COVERAGE_ENV
from specbatch.backends.vllm.vllm_args import speculative_config, vllm_environment
from specbatch.common.errors import ConfigError
from specbatch.config.identity import run_folder_digest
from specbatch.methods import variant_caption
from specbatch.run.profile_schema import build_profile

RATES = "spec.synthetic_acceptance_rates=[0.8,0.5,0.2]"


def profile_file(path: Path, histogram: list[int], method: str = "eagle3", ours: dict | None = None) -> Path:
    """A schema 1.0 profile of steps by tokens accepted, as a run writes it (``ours`` its own figures)."""
    k = len(histogram) - 1
    profile = build_profile(histogram, k, method=method, measured=True, target_model=None, ours=ours)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(profile))
    return path


def test_the_rates_reach_vllms_synthetic_sampler_through_a_free_drafter() -> None:
    job = compose_job(["spec=simulate", RATES])
    assert job.spec.num_speculative_tokens == 3  # one per rate
    assert speculative_config(job.spec) == {
        "method": "custom_class",
        "model": CLASS_PATH,
        "num_speculative_tokens": 3,
        "rejection_sample_method": "synthetic",
        "synthetic_acceptance_rates": [0.8, 0.5, 0.2],
    }
    assert COVERAGE_ENV not in vllm_environment(job)
    # Its text has no natural end: every row runs to max_tokens, and the run says it is simulated.
    assert job.sampling.ignore_eos is True
    assert variant_caption({"synthetic_acceptance_rates": [0.8, 0.5, 0.2]}) == (
        "simulated at acceptance rates 0.8/0.5/0.2"
    )
    job = compose_job(["spec=simulate", RATES, "spec.draft_coverage=0.6"])
    assert vllm_environment(job)[COVERAGE_ENV] == "0.6"
    assert run_folder_digest(job) != run_folder_digest(compose_job(["spec=simulate", RATES]))


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ([], "spec=simulate needs an acceptance profile: spec.profile="),
        (["spec.synthetic_acceptance_rates=[0.5,0.8]"], "[0.5, 0.8] increase somewhere"),
        (["spec.synthetic_acceptance_rates=[1.2]"], "[1.2]: each rate is a chance, in [0, 1]"),
        ([RATES, "spec.num_speculative_tokens=2"], "has 3 rates for spec.num_speculative_tokens=2"),
        ([RATES, "spec.draft_coverage=0"], "spec.draft_coverage=0.0 is the share of steps that draft"),
        ([RATES, "sampling.ignore_eos=false"], "sampling.ignore_eos=false with spec.method=simulate"),
        ([RATES, "spec.k_schedule=[[1,256,3]]"], "spec.k_schedule is not followed for spec.method=simulate"),
        (["spec.profile=/no/such/profile.json"], "spec.profile=/no/such/profile.json: no such file"),
    ],
)
def test_mistakes_are_refused_naming_the_key(overrides: list[str], expected: str) -> None:
    with pytest.raises(ConfigError, match="") as err:
        compose_job(["spec=simulate", *overrides])
    assert expected in str(err.value)


def test_other_methods_and_engines_refuse_its_knobs() -> None:
    with pytest.raises(ConfigError, match=r"spec.synthetic_acceptance_rates is not an option of spec.method=ngram"):
        compose_job(["spec=ngram", RATES])
    with pytest.raises(ConfigError, match="spec.method=simulate is not available"):
        compose_job(["spec=simulate", RATES, "engine.backend=llama_cpp"])


def test_a_profile_fills_the_rates_k_and_coverage(tmp_path: Path) -> None:
    # 8 drafting steps at k=3 that accepted 0, 1, 2 and 3 tokens 3, 2, 2 and 1 times; drafting at 80 % of steps.
    ours = profile_file(tmp_path / "ours.json", [3, 2, 2, 1], method="ngram", ours={"draft_coverage": 0.8})
    job = compose_job(["spec=simulate", f"spec.profile={ours}"])
    assert job.spec.num_speculative_tokens == 3
    assert job.spec.synthetic_acceptance_rates == [0.625, 0.375, 0.125]
    assert job.spec.draft_coverage == 0.8
    assert vllm_environment(job)[COVERAGE_ENV] == "0.8"
    assert "profile" not in speculative_config(job.spec)
    # ModelOpt's profile of a chain drafter (EAGLE3) at a smaller k: its first rates; no coverage: every step.
    theirs = profile_file(tmp_path / "eagle3.json", [3, 2, 2, 1])
    job = compose_job(["spec=simulate", f"spec.profile={theirs}", "spec.num_speculative_tokens=2"])
    assert (job.spec.synthetic_acceptance_rates, job.spec.draft_coverage) == ([0.625, 0.375], None)
    # n-gram re-plans its draft at each k: no rates at another k than it was measured at.
    with pytest.raises(ConfigError, match="measured at num_speculative_tokens=3"):
        compose_job(["spec=simulate", f"spec.profile={ours}", "spec.num_speculative_tokens=2"])


def test_a_recorded_config_reloads_and_an_edited_profile_is_found(tmp_path: Path) -> None:
    path = profile_file(tmp_path / "p.json", [3, 2, 2, 1], method="ngram", ours={"draft_coverage": 0.8})
    job = compose_job(["spec=simulate", f"spec.profile={path}"])
    # As a run's config.yaml holds it: the profile and the rates and coverage it gave.
    recorded = [
        "spec=simulate",
        f"spec.profile={path}",
        f"spec.synthetic_acceptance_rates={job.spec.synthetic_acceptance_rates}",
        f"spec.draft_coverage={job.spec.draft_coverage}",
    ]
    assert compose_job(recorded).spec.synthetic_acceptance_rates == job.spec.synthetic_acceptance_rates
    profile_file(path, [1, 2, 2, 3], method="ngram", ours={"draft_coverage": 0.8})
    with pytest.raises(ConfigError, match=r"differ from spec.profile's \[0.875, 0.625, 0.375\]"):
        compose_job(recorded)


def test_a_run_folder_names_its_profile(tmp_path: Path) -> None:
    run = tmp_path / "ngram-k3-1a2b3c4d"
    profile_file(run / "stats" / "shard-00000-of-00002" / "speculation_profile.json", [3, 2, 2, 1], method="ngram")
    assert compose_job(["spec=simulate", f"spec.profile={run}"]).spec.synthetic_acceptance_rates == [
        0.625,
        0.375,
        0.125,
    ]
    profile_file(run / "stats" / "shard-00001-of-00002" / "speculation_profile.json", [3, 2, 2, 1], method="ngram")
    with pytest.raises(ConfigError, match=r"2 shard profiles and no merged/speculation_profile.json: merge"):
        compose_job(["spec=simulate", f"spec.profile={run}"])
    merged = profile_file(run / "merged" / "speculation_profile.json", [1, 2, 2, 3], method="ngram")
    job = compose_job(["spec=simulate", f"spec.profile={run}"])
    assert job.spec.synthetic_acceptance_rates == [0.875, 0.625, 0.375]
    # Compare names the set-up by the run its profile came from.
    assert variant_caption({"synthetic_acceptance_rates": [0.8], "profile": str(merged), "draft_coverage": 0.5}) == (
        "simulated at the acceptance of ngram-k3-1a2b3c4d (drafts at 50% of steps)"
    )


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("{not json", "cannot be read as JSON"),
        ('{"acceptance_length": 2.0}', "not a speculation profile in ModelOpt's schema 1.x (no schema_version)"),
        ('{"schema_version": "2.0"}', "(schema_version 2.0)"),
        ('{"schema_version": "1.0"}', "num_speculative_tokens is missing; verification_method is missing"),
    ],
)
def test_a_broken_profile_is_refused_before_loading(tmp_path: Path, content: str, expected: str) -> None:
    path = tmp_path / "p.json"
    path.write_text(content)
    with pytest.raises(ConfigError) as err:
        compose_job(["spec=simulate", f"spec.profile={path}"])
    assert str(err.value).startswith(f"spec.profile={path}") and expected in str(err.value)
