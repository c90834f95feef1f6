"""ModelOpt's speculation profile schema 1.0 (specbatch.run.profile_schema): the spec of its fields sees what breaks
it, ModelOpt's own checks, and a profile's rates handed to vLLM 0.32's synthetic rejection sampler, which its own
config validation takes and reads as the same acceptance."""

from __future__ import annotations

import copy

import pytest

from specbatch.common.errors import ConfigError
from specbatch.methods.simulate import synthetic_acceptance_rates
from specbatch.run.profile_schema import (
    acceptance_figures,
    build_profile,
    schema_problems,
    validation,
)

# 8 drafting steps at k=3 that accepted 0, 1, 2 and 3 tokens: 3, 2, 2 and 1 times.
HISTOGRAM = [3, 2, 2, 1]


def profile_of(method: str = "ngram", histogram: list[int] = HISTOGRAM, k: int = 3) -> dict:
    return build_profile(histogram, k, method=method, measured=True, target_model={"id": "org/model"})


def test_the_figures_are_modelopts_from_the_histogram() -> None:
    figures = acceptance_figures(HISTOGRAM, 3)
    # P(the first i+1 drafted tokens all accepted) and P(token i+1 | the first i): from the same counts.
    assert figures["marginal_accept_rates"] == [0.625, 0.375, 0.125]
    assert figures["conditional_accept_rates"] == [0.625, 0.6, 0.333333]
    assert figures["mean_accept_length"] == (3 * 1 + 2 * 2 + 2 * 3 + 1 * 4) / 8 == 2.125
    assert figures["acceptance_length_histogram"] == {"1": 3, "2": 2, "3": 2, "4": 1}
    # No step: nothing measured, and no mean to hold the vector to.
    empty = build_profile([0, 0, 0, 0], 3, method="ngram", measured=True, target_model=None)
    assert not empty["measured"] and empty["mean_accept_length"] is None and empty["accept_length_by_k"] == {}
    assert empty["validation"]["mean_consistency"] is None and schema_problems(empty) == []


def test_modelopts_checks_see_what_they_are_for() -> None:
    assert validation(2.125, [0.625, 0.375, 0.125])["mean_consistency"]["passed"]
    cut_short = validation(2.5, [0.625, 0.375])["mean_consistency"]
    assert not cut_short["passed"] and cut_short["abs_delta"] == 0.5
    rising = validation(None, [0.5, 0.6, 0.1])["marginal_monotonicity"]
    assert rising == {"passed": False, "violations": [{"position": 1, "value": 0.6, "previous": 0.5}]}


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda p: p.pop("marginal_accept_rates"), "marginal_accept_rates is missing"),
        (lambda p: p.update(measured=1), "measured is 1, not true or false"),
        (lambda p: p.update(num_speculative_tokens=True), "num_speculative_tokens is true, not an integer"),
        (lambda p: p.update(num_speculative_tokens=3.0), "num_speculative_tokens is 3.0, not an integer"),
        (lambda p: p.update(mean_accept_length="2.1"), 'mean_accept_length is "2.1", not a number or null'),
        (lambda p: p.update(schema_version="2.0"), 'schema_version is "2.0", not 1.x'),
        (lambda p: p.update(conditional_accept_rates=[0.6, 0.5]), "conditional_accept_rates has 2 rates"),
        (lambda p: p.update(marginal_accept_rates=[1.2, 0.5, 0.1]), "marginal_accept_rates[0] is 1.2, not a rate"),
        (lambda p: p.update(acceptance_length_histogram={"0": 3}), 'acceptance_length_histogram has the key "0"'),
        (lambda p: p.update(accept_length_by_k={"k3": 2.1}), 'accept_length_by_k has the key "k3", not a k'),
        (lambda p: p.update(mean_accept_length_per_request=[2.0]), "mean_accept_length_per_request is [2.0]"),
    ],
)
def test_the_schema_spec_sees_a_planted_fault(change, says: str) -> None:
    profile = profile_of()
    assert schema_problems(profile) == []
    broken = copy.deepcopy(profile)
    change(broken)
    assert any(problem.startswith(says) for problem in schema_problems(broken)), schema_problems(broken)


def test_a_profile_from_modelopts_own_writer_meets_the_spec() -> None:
    # As specdec_bench's build_profile wrote one at the commit profile_schema cites (EAGLE3, K=3, its test's
    # histogram {1: 40, 2: 30, 3: 30}), and as its stub_profile leaves an unmeasured one.
    theirs = {
        "schema_version": "1.0",
        "measured": True,
        "method": "eagle3",
        "draft_checkpoint": None,
        "target_model": None,
        "num_speculative_tokens": 3,
        "block_size": None,
        "max_supported_k": 3,
        "verification_method": "longest_prefix",
        "conditional_accept_rates": [0.6, 0.5, 0.0],
        "marginal_accept_rates": [0.6, 0.3, 0.0],
        "mean_accept_length": 1.9,
        "mean_accept_length_per_request": 1.9,
        "accept_length_model": "chain_analytic",
        "accept_length_by_k": {"3": 1.9},
        "acceptance_length_histogram": {"1": 40, "2": 30, "3": 30},
        "per_category": None,
        "measurement_conditions": None,
        "validation": {"mean_consistency": {"passed": True}, "marginal_monotonicity": {"passed": True}},
    }
    assert schema_problems(theirs) == []
    stub = {**theirs, "measured": False, "mean_accept_length": None, "accept_length_by_k": {}, "validation": None}
    assert schema_problems(stub) == []
    assert synthetic_acceptance_rates(theirs, k=2) == [0.6, 0.3]


def test_synthetic_rates_are_the_marginals_at_the_k_measured_or_below_for_a_chain() -> None:
    assert synthetic_acceptance_rates(profile_of()) == [0.625, 0.375, 0.125]
    with pytest.raises(ConfigError, match=r"measured at num_speculative_tokens=3 .* gives no rates at k=2"):
        synthetic_acceptance_rates(profile_of(), k=2)
    assert synthetic_acceptance_rates(profile_of("eagle3"), k=2) == [0.625, 0.375]
    with pytest.raises(ConfigError, match="set num_speculative_tokens=3, or measure a profile at k=5"):
        synthetic_acceptance_rates(profile_of("eagle3"), k=5)
    damaged = profile_of()
    damaged["validation"]["marginal_monotonicity"]["passed"] = False
    with pytest.raises(ConfigError, match="increase somewhere"):
        synthetic_acceptance_rates(damaged)
    withheld = {**profile_of(), "marginal_accept_rates": None, "verification_method": "block"}
    with pytest.raises(ConfigError, match="verification_method='block'"):
        synthetic_acceptance_rates(withheld)


def test_a_profile_round_trips_into_vllms_synthetic_rejection_sampler() -> None:
    from vllm.config import SpeculativeConfig
    from vllm.v1.sample.rejection_sampler import unconditional_to_conditional_rates

    profile = profile_of()
    rates = synthetic_acceptance_rates(profile)

    def synthetic(rates: list[float]) -> SpeculativeConfig:
        return SpeculativeConfig(
            method="ngram",
            num_speculative_tokens=3,
            prompt_lookup_min=2,
            prompt_lookup_max=4,
            rejection_sample_method="synthetic",
            synthetic_acceptance_rates=rates,
        )

    # vLLM's own validation takes them (length k, in [0, 1], non-increasing) and keeps them as given.
    assert synthetic(rates).synthetic_acceptance_rates == rates
    # Its sampler draws position by position from the conditional rates it derives: ours, so it runs at the
    # acceptance this profile measured (AL = 1 + the sum of the rates it was given).
    assert unconditional_to_conditional_rates(rates) == pytest.approx(profile["conditional_accept_rates"], abs=1e-6)
    assert 1 + sum(rates) == pytest.approx(profile["mean_accept_length"])
    # The other vector would be the wrong acceptance: vLLM would read 0.6 as "the first two accepted", not 0.375.
    assert unconditional_to_conditional_rates(profile["conditional_accept_rates"]) != pytest.approx(
        profile["conditional_accept_rates"], abs=1e-3
    )
    # And what could never be an acceptance, vLLM refuses as this module does.
    with pytest.raises(ValueError, match="non-increasing"):
        synthetic([0.5, 0.6, 0.1])
