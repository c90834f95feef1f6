"""NVIDIA ModelOpt's speculation profile, schema 1.0: the shape every ``speculation_profile.json`` of ours is written
in (a run's, measured; a prediction's set-ups, replayed), so that what reads ModelOpt's profiles (Dynamo's mocker,
aiconfigurator, ModelOpt itself) reads ours, and vLLM's synthetic rejection sampler takes their rates.

Read from ModelOpt's source, ``examples/specdec_bench/specdec_bench/speculation_profile.py`` of NVIDIA/Model-Optimizer
at commit edf879d3daf7879acdeb2dab9f54a591837da7b0 (PR #2247: ``build_profile``, ``stub_profile``,
``_consistency_check``, ``_monotonicity_check``), with the histogram of its ``metrics/acceptance_rate.py``:

- ``marginal_accept_rates[i]`` = P(the first i+1 drafted tokens are all accepted): a survival function, never
  increasing, and AL = 1 + their sum. vLLM 0.32's ``synthetic_acceptance_rates`` is this vector ("per-position
  *unconditional* acceptance rates", its config/speculative.py), which spec=simulate hands over
  (``specbatch.methods.simulate.synthetic_acceptance_rates``).
- ``conditional_accept_rates[i]`` = P(token i+1 accepted | the first i were): what Dynamo's mocker draws.
- ``acceptance_length_histogram``: steps by the tokens each produced, the target's bonus token included (``"1"``:
  none of the draft accepted), keyed by strings as JSON keeps them; ``mean_accept_length`` is its mean.
- ``validation``: that mean against 1 + Σ marginal (within 0.02: a vector cut short of the k that ran fails) and the
  marginals never increasing. Rates and means are rounded to 6 decimals, as ModelOpt rounds them.

One difference of counting, ours being vLLM's: a step is a drafting step (vLLM's ``num_drafts``), so a step in which
the drafter proposed nothing (n-gram without a match) is not one, where specdec_bench counts every decode step.

What the schema has no field for (rows, drafts, draft tokens, the draft acceptance rate, a prediction's set-up) goes
under a key of our own, ``specbatch``, beside the schema's fields.
"""

from __future__ import annotations

from typing import Any

from specbatch.engine.spec_metrics import accepted_per_position_from_histogram
from specbatch.methods import METHODS
from specbatch.methods.simulate import OURS as PROFILE_OURS

# The schema's fields and their check (what keeps a dict from being a profile its readers can take, each problem
# naming its field) live with spec=simulate, the lower layer, so that it and the run's records check a profile with
# the same code before reading it; re-exported as the schema's.
from specbatch.methods.simulate import schema_problems as schema_problems

# The schema this module writes (ModelOpt's ``schema_version``); a reader takes any 1.x.
MODELOPT_SCHEMA = "1.0"
# The key of what the schema has no field for: spec=simulate reads it too.
OURS = PROFILE_OURS
# Standard rejection sampling accepts the longest drafted prefix the target agrees with: what the vectors describe.
LONGEST_PREFIX = "longest_prefix"
# ModelOpt's own rounding and the tolerance of its mean-consistency check.
DECIMALS = 6
MEAN_TOLERANCE = 0.02


def acceptance_figures(histogram: list[int], k: int) -> dict[str, Any]:
    """The schema's figures of drafting steps counted by tokens accepted (``histogram[j]``: steps that accepted j of
    their draft, j = 0..k, vLLM's per-request histogram summed): the mean acceptance length (None without a step), the
    conditional and marginal rates over positions 0..k-1 (from the counts, so they agree with each other exactly) and
    the histogram keyed by acceptance length. A histogram longer than k + 1 is kept whole, so the check sees it."""
    steps = sum(histogram)
    per_position = (accepted_per_position_from_histogram(list(histogram)) + [0] * k)[:k]
    marginal = [count / steps if steps else 0.0 for count in per_position]
    before = [steps, *per_position[:-1]]
    conditional = [count / prior if prior else 0.0 for count, prior in zip(per_position, before, strict=True)]
    mean = sum((j + 1) * n for j, n in enumerate(histogram)) / steps if steps else None
    return {
        "mean_accept_length": _round(mean),
        "conditional_accept_rates": [_round(r) for r in conditional],
        "marginal_accept_rates": [_round(r) for r in marginal],
        "acceptance_length_histogram": {str(j + 1): n for j, n in enumerate(histogram)},
    }


def validation(mean: float | None, marginal: list[float]) -> dict[str, Any]:
    """ModelOpt's two checks: ``mean`` (None: nothing measured, nothing to hold the vector to) against 1 + Σ
    ``marginal``, and ``marginal`` never increasing (vLLM's synthetic sampler refuses one that does)."""
    consistency = None
    if mean is not None:
        implied = 1.0 + sum(marginal)
        delta = abs(implied - mean)
        consistency = {
            "implied_mean_accept_length": _round(implied),
            "reported_mean_accept_length": _round(mean),
            "abs_delta": _round(delta),
            "tolerance": MEAN_TOLERANCE,
            "passed": delta <= MEAN_TOLERANCE,
        }
    violations = [
        {"position": i, "value": marginal[i], "previous": marginal[i - 1]}
        for i in range(1, len(marginal))
        if marginal[i] > marginal[i - 1] + 1e-9
    ]
    return {
        "mean_consistency": consistency,
        "marginal_monotonicity": {"passed": not violations, "violations": violations},
    }


def accept_length_model(method: str) -> str:
    """ModelOpt's ``accept_length_model``: ``chain_analytic`` when the method's draft at k is the first k tokens of
    its draft at k + 1 (its module says so: Method.chain_drafting), so the rates give AL at every smaller k;
    ``measured_per_k`` otherwise."""
    entry = {m.name: m for m in METHODS.values()}.get(method)
    return "chain_analytic" if entry is not None and entry.chain_drafting else "measured_per_k"


def build_profile(
    histogram: list[int],
    k: int,
    *,
    method: str,
    measured: bool,
    target_model: dict[str, Any] | None,
    draft_checkpoint: dict[str, Any] | None = None,
    per_category: dict[str, dict[str, Any]] | None = None,
    mean_per_request: float | None = None,
    measurement_conditions: dict[str, Any] | None = None,
    ours: dict[str, Any] | None = None,
    verification_method: str = LONGEST_PREFIX,
) -> dict[str, Any]:
    """A schema 1.0 profile of drafting steps counted by tokens accepted (``histogram``, as
    :func:`acceptance_figures` takes it) at ``k``: ``measured`` (a run's figures) unless they were replayed, and in
    any case not when there is no step to measure; ``per_category`` holds each category's
    :func:`acceptance_figures` (and what else the caller keeps of it); ``mean_per_request`` the mean of each
    request's own AL, which ModelOpt keeps beside the per-step mean for model cards that quote that one."""
    figures = acceptance_figures(histogram, k)
    mean = figures["mean_accept_length"]
    return {
        "schema_version": MODELOPT_SCHEMA,
        "measured": measured and mean is not None,
        "method": method,
        "draft_checkpoint": draft_checkpoint,
        "target_model": target_model,
        "num_speculative_tokens": k,
        # A trained block size is a block drafter's checkpoint's own; the profile does not read checkpoints.
        "block_size": None,
        "max_supported_k": k,
        "verification_method": verification_method,
        "conditional_accept_rates": figures["conditional_accept_rates"],
        "marginal_accept_rates": figures["marginal_accept_rates"],
        "mean_accept_length": mean,
        "mean_accept_length_per_request": _round(mean_per_request),
        "accept_length_model": accept_length_model(method),
        "accept_length_by_k": {} if mean is None else {str(k): mean},
        "acceptance_length_histogram": figures["acceptance_length_histogram"],
        "per_category": per_category or None,
        "measurement_conditions": measurement_conditions,
        "validation": validation(mean, figures["marginal_accept_rates"]),
        OURS: ours or {},
    }


def checkpoint_id(path: str | None) -> str | None:
    """A checkpoint's ``org/model`` (ModelOpt's checkpoint_id: the last two parts of its path), so that a profile,
    logged and shared, carries no machine's folder layout; run.json keeps the whole path."""
    parts = [part for part in str(path or "").replace("\\", "/").split("/") if part]
    return "/".join(parts[-2:]) or None


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, DECIMALS)
