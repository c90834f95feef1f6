"""Simulate a drafter you do not have: the target alone, run at an acceptance profile (vLLM 0.32's synthetic rejection
sampler, ``rejection_sample_method: synthetic``), to see what that acceptance would give on this machine, at this
batch, before owning the drafter; e.g. EAGLE3's acceptance measured on a GPU, here.

The profile is ``spec.profile`` (a ``speculation_profile.json``: ours, or any in NVIDIA ModelOpt's schema 1.x) or
``spec.synthetic_acceptance_rates`` (vLLM's name: per position, the chance that the draft is accepted up to there).
The profile fills the rates, and ``spec.draft_coverage``: the share of steps at which the simulated drafter drafts
(ours record it: n-gram and suffix decoding find nothing to draft at some steps, where the target verifies one
token; a neural drafter drafts at every step, 1, which is also what a profile without it means).

What it does not count: the drafter's own time (the carrier it runs drafts placeholders for free), so the tok/s is
the target's side, an upper bound for a drafter that costs something. Its rows' text is not a real output (accepted
placeholders are in it): they are ``simulated``, never compared token for token, never recommended.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specbatch.common.errors import ConfigError, require
from specbatch.methods.method import Method

# Where our profiles keep what the schema has no field for (specbatch.run.profile_schema writes it; defined here, the
# lower layer, so that this method reads the same key), and the figure there this method reads.
OURS = "specbatch"
COVERAGE_FIELD = "draft_coverage"
# What a run's profiles are called (specbatch.run.records.profile_file).
PROFILE_NAME = "speculation_profile.json"
# The rates must equal the profile's to this many decimals (a profile rounds them to 6).
_DECIMALS = 6


def synthetic_acceptance_rates(profile: dict[str, Any], k: int | None = None) -> list[float]:
    """What vLLM's synthetic rejection sampler takes as ``synthetic_acceptance_rates`` (in ``speculative_config``,
    with ``rejection_sample_method='synthetic'``) to run at ``profile``'s acceptance: its marginal rates, at the k it
    was measured at, or at a smaller ``k`` (its first k rates) when its method drafts in a chain
    (``accept_length_model`` ``chain_analytic``). ConfigError naming the field and the way out otherwise."""
    measured_k = profile["num_speculative_tokens"]
    rates = profile.get("marginal_accept_rates")
    if rates is None:
        why = profile.get("vectors_unavailable_reason") or f"verification_method={profile['verification_method']!r}"
        raise ConfigError(
            f"the profile has no marginal_accept_rates ({why}): take a profile measured with standard verification"
        )
    k = measured_k if k is None else k
    chain = profile.get("accept_length_model") == "chain_analytic"
    if not 1 <= k <= measured_k or (k < measured_k and not chain):
        raise ConfigError(
            f"the profile was measured at num_speculative_tokens={measured_k} and its method "
            f"({profile.get('method')}, accept_length_model={profile.get('accept_length_model')!r}) gives no rates at "
            f"k={k}: set num_speculative_tokens={measured_k}, or measure a profile at k={k}"
        )
    check = (profile.get("validation") or {}).get("marginal_monotonicity") or {"passed": True}
    if not check["passed"]:
        raise ConfigError(
            f"the profile's marginal_accept_rates {rates} increase somewhere (validation.marginal_monotonicity), "
            "which no acceptance can do and vLLM refuses: the profile is damaged, measure it again"
        )
    return [float(rate) for rate in rates[:k]]


def profile_file(path: str) -> Path:
    """The profile ``spec.profile`` names: a file, or a run folder's (merged, or its one shard's)."""
    given = Path(path).expanduser()
    if not given.is_dir():
        return given
    merged = given / "merged" / PROFILE_NAME
    shards = sorted(given.glob(f"stats/*/{PROFILE_NAME}"))
    if merged.is_file() or len(shards) != 1:
        require(
            merged.is_file(),
            f"spec.profile={path} is a folder with {len(shards)} shard profiles and no merged/{PROFILE_NAME}: merge "
            f"the run (python jobs/merge.py {path}), or name one file",
        )
        return merged
    return shards[0]


def read_profile_file(path: str) -> dict[str, Any]:
    """A profile in ModelOpt's schema 1.x from ``path`` (a file or a run folder); ConfigError naming
    ``spec.profile`` and the fix."""
    where = f"spec.profile={path}"
    try:
        profile = json.loads(profile_file(path).read_text())
    except FileNotFoundError:
        raise ConfigError(
            f"{where}: no such file; name a finished run's folder, its {PROFILE_NAME} (merged/ or "
            "stats/<shard>/), or a profile in ModelOpt's schema 1.x"
        ) from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{where} cannot be read as JSON ({exc}): point it at a speculation_profile.json") from None
    version = str(profile.get("schema_version", "")) if isinstance(profile, dict) else ""
    require(
        version.split(".")[0] == "1",
        f"{where} is not a speculation profile in ModelOpt's schema 1.x "
        f"({'schema_version ' + version if version else 'no schema_version'}): a run of this version writes one (one "
        "of ours from before that schema: measure again with this version), or pass spec.synthetic_acceptance_rates",
    )
    missing = [key for key in ("num_speculative_tokens", "verification_method") if key not in profile]
    require(not missing, f"{where} lacks {', '.join(missing)}: it is damaged, measure it again")
    return profile


def _require_a_source(spec: Any) -> None:
    require(
        spec.synthetic_acceptance_rates is not None or spec.profile is not None,
        "spec=simulate needs an acceptance profile: spec.profile=<a finished run's folder or a profile file>, or "
        "spec.synthetic_acceptance_rates=[0.8,0.55,0.35] (per position: the chance the draft is accepted up to there)",
    )


def k_of_profile(spec: Any) -> None:
    """A null k is the profile's, or one per rate given."""
    _require_a_source(spec)
    if spec.profile is not None:
        spec.num_speculative_tokens = read_profile_file(spec.profile)["num_speculative_tokens"]
    elif spec.synthetic_acceptance_rates:
        spec.num_speculative_tokens = len(spec.synthetic_acceptance_rates)


def resolve_rates(spec: Any) -> None:
    """A source of the rates; a profile fills them (and the coverage it records); the rates follow vLLM
    0.32's rules (config/speculative.py: one per position up to k, each in [0, 1], never increasing), and a rate set
    beside a profile must be the profile's (a recorded config has both: a profile edited since is found here)."""
    _require_a_source(spec)
    rates, path, k = spec.synthetic_acceptance_rates, spec.profile, spec.num_speculative_tokens
    if path is not None:
        profile = read_profile_file(path)
        try:
            theirs = synthetic_acceptance_rates(profile, k)
        except ConfigError as exc:
            raise ConfigError(f"spec.profile={path}: {exc}") from None
        coverage = (profile.get(OURS) or {}).get(COVERAGE_FIELD)
        rounded = [round(r, _DECIMALS) for r in theirs]
        require(
            rates is None or [round(float(r), _DECIMALS) for r in rates] == rounded,
            f"spec.synthetic_acceptance_rates={list(rates or [])} differ from spec.profile's {rounded} (the profile "
            "changed, or both were given): drop spec.synthetic_acceptance_rates to take the profile's",
        )
        require(
            spec.draft_coverage is None or coverage is None or round(spec.draft_coverage, _DECIMALS) == coverage,
            f"spec.draft_coverage={spec.draft_coverage} differs from spec.profile's {coverage}: drop "
            "spec.draft_coverage to take the profile's",
        )
        spec.synthetic_acceptance_rates = rounded
        if spec.draft_coverage is None and coverage is not None:
            spec.draft_coverage = float(coverage)
    rates = [float(r) for r in spec.synthetic_acceptance_rates]
    require(
        len(rates) == k,
        f"spec.synthetic_acceptance_rates has {len(rates)} rates for spec.num_speculative_tokens={k}: give one per "
        "drafted position",
    )
    require(
        all(0.0 <= r <= 1.0 for r in rates),
        f"spec.synthetic_acceptance_rates={rates}: each rate is a chance, in [0, 1]",
    )
    require(
        all(b <= a for a, b in zip(rates, rates[1:], strict=False)),
        f"spec.synthetic_acceptance_rates={rates} increase somewhere: position i's rate is the chance that the first "
        "i+1 drafts are all accepted, so it never exceeds the one before",
    )
    spec.synthetic_acceptance_rates = rates
    coverage = spec.draft_coverage
    require(
        coverage is None or 0.0 < coverage <= 1.0,
        f"spec.draft_coverage={coverage} is the share of steps that draft: use a number in (0, 1], or null for 1",
    )


METHOD = Method(
    name="simulate",
    rank=100,
    knobs=("synthetic_acceptance_rates", "profile", "draft_coverage"),
    knob_checks=(resolve_rates,),
    fills_k=k_of_profile,
    k_schedule_refusal="its acceptance rates are one per position of one k (vLLM's synthetic_acceptance_rates)",
    simulated=True,
)
