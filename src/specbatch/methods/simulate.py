"""Simulate a drafter you do not have: the target alone, run at an acceptance profile (vLLM 0.32's synthetic rejection
sampler, ``rejection_sample_method: synthetic``), to see what that acceptance would give on this machine, at this
batch, before owning the drafter; e.g. EAGLE3's acceptance measured on a GPU, here.

The profile is ``spec.profile`` (a ``speculation_profile.json``: ours, or any in NVIDIA ModelOpt's schema 1.x) or
``spec.synthetic_acceptance_rates`` (vLLM's name: per position, the chance that the draft is accepted up to there).
The profile fills the rates, and ``spec.draft_coverage``: the share of steps at which the simulated drafter drafts
(ours record it: n-gram and suffix decoding find nothing to draft at some steps, where the target verifies one
token; a neural drafter drafts at every step, 1, which is also what a profile without it means). Every field of the
profile is checked before it is read (:func:`schema_problems`, the one check of a profile, which the run's records
call too): a damaged one is refused in one line naming the file, the field and the fix, before anything loads.

What it does not count: the drafter's own time (the carrier it runs drafts placeholders for free), so the tok/s is
the target's side, an upper bound for a drafter that costs something. Its rows' text is not a real output (accepted
placeholders are in it): they are ``simulated``, never compared token for token, never recommended.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Collection
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

_NULL = type(None)
_NUMBER = (int, float)
# The fields of ModelOpt's speculation profile schema 1.x (specbatch.run.profile_schema writes them; they are here,
# the lower layer, so that this method's reading and the run's records check a profile with the same code), and the
# JSON types each may hold: ModelOpt's build_profile writes them all; its stub_profile (nothing measured) leaves the
# mean and the validation null. Its docstring calls the checkpoints "dicts describing what was measured"; its
# checkpoint_id makes an "org/model" string, taken too.
FIELDS: dict[str, tuple[type, ...]] = {
    "schema_version": (str,),
    "measured": (bool,),
    "method": (str, _NULL),
    "draft_checkpoint": (dict, str, _NULL),
    "target_model": (dict, str, _NULL),
    "num_speculative_tokens": (int,),
    "block_size": (int, _NULL),
    "max_supported_k": (int,),
    "verification_method": (str,),
    "conditional_accept_rates": (list, _NULL),
    "marginal_accept_rates": (list, _NULL),
    "mean_accept_length": (*_NUMBER, _NULL),
    "accept_length_model": (str,),
    "accept_length_by_k": (dict,),
    "acceptance_length_histogram": (dict, _NULL),
    "per_category": (dict, _NULL),
    "measurement_conditions": (dict, _NULL),
    "validation": (dict, _NULL),
}
# Checked when present: written by the revision profile_schema cites but not by every one before it (the mean per
# request), by a verification without vectors (why they are null: this module quotes it), and ours alone.
OPTIONAL_FIELDS: dict[str, tuple[type, ...]] = {
    "mean_accept_length_per_request": (*_NUMBER, _NULL),
    "vectors_unavailable_reason": (str, _NULL),
    OURS: (dict, _NULL),
}
# What this method cannot read a profile without; the rest it reads (the rates, the model of the acceptance
# length, the monotonicity check, the coverage) may be absent, as in a profile written by hand.
NEEDED_FIELDS = ("schema_version", "num_speculative_tokens", "verification_method")


def schema_problems(profile: Any, required: Collection[str] = tuple(FIELDS)) -> list[str]:
    """What keeps ``profile`` from being a schema 1.x profile that its readers can take (empty when nothing), each
    problem naming its field by JSON path (``specbatch.draft_coverage``, ``marginal_accept_rates[1]``): a field of
    ``required`` (all the schema's, unless the reader needs fewer) missing, and any field present of another JSON
    type, out of its range (a rate or a share in [0, 1], a count 0 or more, k 1 or more, a mean 1 or more; never NaN
    or infinite, which Python's JSON reads) or with another number of rates than k. The one check of a profile: the
    run's records (specbatch.run.records.profile_file) and spec=simulate (:func:`read_profile_file`) call it."""
    if not isinstance(profile, dict):
        return ["not a JSON object"]
    problems = [f"{key} is missing" for key in required if key not in profile]
    for key, types in {**FIELDS, **OPTIONAL_FIELDS}.items():
        if key not in profile:
            continue
        value = profile[key]
        check = _VALUE_CHECKS.get(key)
        problems += _wrong_type(key, value, types) or ([] if check is None or value is None else check(value, profile))
    return problems


def _is(value: Any, types: tuple[type, ...]) -> bool:
    # JSON's true is no number: bool is a subclass of int in Python.
    return bool in types if isinstance(value, bool) else isinstance(value, types)


def _is_number(value: Any, low: float, high: float = math.inf) -> bool:
    return _is(value, _NUMBER) and math.isfinite(value) and low <= value <= high


def _shown(value: Any) -> str:
    """``value`` as the file has it (a string quoted, null as null), cut short: the problem stays one line."""
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


# JSON's names of the types a field may hold, as a message says them (an int or a float: a number).
_TYPE_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string", list: "a list"}


def _wrong_type(path: str, value: Any, types: tuple[type, ...]) -> list[str]:
    if _is(value, types):
        return []
    kinds = [t for t in types if not (t is int and float in types)]
    names = " or ".join({_NULL: "null", dict: "an object"}.get(t) or _TYPE_NAMES[t] for t in kinds)
    return [f"{path} is {_shown(value)}, not {names}"]


def _out_of_range(path: str, value: Any, ok: bool, wanted: str) -> list[str]:
    return [] if ok else [f"{path} is {_shown(value)}, not {wanted}"]


def _rates(key: str) -> Callable[[list[Any], dict[str, Any]], list[str]]:
    def check(rates: list[Any], profile: dict[str, Any]) -> list[str]:
        problems = [
            f"{key}[{i}] is {_shown(rate)}, not a rate in [0, 1]"
            for i, rate in enumerate(rates)
            if not _is_number(rate, 0.0, 1.0)
        ]
        k = profile.get("num_speculative_tokens")
        # A k that is no k is its own problem, not that of the rates.
        if _is(k, (int,)) and k >= 1 and len(rates) != k:
            problems.append(f"{key} has {len(rates)} rates, not one per drafted position (num_speculative_tokens={k})")
        return problems

    return check


def _mean(path: str, mean: Any) -> list[str]:
    # The target's own token counts in every step: no mean acceptance length is below 1.
    return _out_of_range(path, mean, _is_number(mean, 1.0), "a number of 1 or more")


def _count(path: str, steps: Any) -> list[str]:
    return _out_of_range(path, steps, _is(steps, (int,)) and steps >= 0, "a count of steps (0 or more)")


def _by_length(
    key: str, what: str, check: Callable[[str, Any], list[str]]
) -> Callable[[dict[str, Any], Any], list[str]]:
    """The check of a field keyed by 1, 2, ... (``what`` they are: JSON keeps them as strings), each value's by
    ``check(its path, it)``."""

    def problems(values: dict[str, Any], _: Any) -> list[str]:
        found = []
        for name, value in values.items():
            if name.isascii() and name.isdigit() and int(name) >= 1:
                found += check(f'{key}["{name}"]', value)
            else:
                found.append(f"{key} has the key {_shown(name)}, not {what} (1, 2, ...)")
        return found

    return problems


def _validation(checks: dict[str, Any], _: dict[str, Any]) -> list[str]:
    # ModelOpt's two checks, each null or with its verdict (this method refuses rates whose monotonicity failed).
    problems = []
    for name in ("mean_consistency", "marginal_monotonicity"):
        check, path = checks.get(name), f"validation.{name}"
        if check is None:
            continue
        wrong = _wrong_type(path, check, (dict, _NULL))
        if not wrong and "passed" not in check:
            wrong = [f"{path}.passed is missing"]
        problems += wrong or _wrong_type(f"{path}.passed", check["passed"], (bool,))
    return problems


def _ours(ours: dict[str, Any], _: dict[str, Any]) -> list[str]:
    coverage, path = ours.get(COVERAGE_FIELD), f"{OURS}.{COVERAGE_FIELD}"
    if coverage is None:
        return []
    wrong = _wrong_type(path, coverage, (*_NUMBER, _NULL))
    return wrong or _out_of_range(path, coverage, _is_number(coverage, 0.0, 1.0), "a share of steps in [0, 1]")


# The checks of a field's value, once its JSON type is right (and it is not null).
_VALUE_CHECKS: dict[str, Callable[[Any, dict[str, Any]], list[str]]] = {
    "schema_version": lambda version, _: _out_of_range("schema_version", version, version.split(".")[0] == "1", "1.x"),
    "num_speculative_tokens": lambda k, _: _out_of_range("num_speculative_tokens", k, k >= 1, "1 or more"),
    "conditional_accept_rates": _rates("conditional_accept_rates"),
    "marginal_accept_rates": _rates("marginal_accept_rates"),
    "mean_accept_length": lambda mean, _: _mean("mean_accept_length", mean),
    "mean_accept_length_per_request": lambda mean, _: _mean("mean_accept_length_per_request", mean),
    "acceptance_length_histogram": _by_length("acceptance_length_histogram", "an acceptance length", _count),
    "accept_length_by_k": _by_length("accept_length_by_k", "a k", _mean),
    "validation": _validation,
    OURS: _ours,
}


def synthetic_acceptance_rates(profile: dict[str, Any], k: int | None = None) -> list[float]:
    """What vLLM's synthetic rejection sampler takes as ``synthetic_acceptance_rates`` (in ``speculative_config``,
    with ``rejection_sample_method='synthetic'``) to run at ``profile``'s acceptance: its marginal rates, at the k it
    was measured at, or at a smaller ``k`` (its first k rates) when its method drafts in a chain
    (``accept_length_model`` ``chain_analytic``). ConfigError naming the field and the way out otherwise. ``profile``
    is one :func:`schema_problems` found nothing wrong with."""
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
    # The rates themselves too: a file edited since its check was written would reach vLLM's refusal otherwise.
    if not check["passed"] or any(b > a for a, b in zip(rates, rates[1:], strict=False)):
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


def _named(path: str) -> str:
    """``spec.profile`` as the user gave it, and the file it names when that is a run folder."""
    file = profile_file(path)
    return f"spec.profile={path}" + ("" if file == Path(path).expanduser() else f" ({file})")


def read_profile_file(path: str) -> dict[str, Any]:
    """A profile in ModelOpt's schema 1.x from ``path`` (a file or a run folder), every field this method reads
    whole (:func:`schema_problems`); ConfigError naming ``spec.profile``, the file, the field and the fix."""
    where, file = _named(path), profile_file(path)
    try:
        profile = json.loads(file.read_text())
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
    problems = schema_problems(profile, required=NEEDED_FIELDS)
    require(
        not problems,
        f"{where} is damaged: {'; '.join(problems)}: correct the field, or measure the profile again (a run writes "
        "one), or pass spec.synthetic_acceptance_rates instead",
    )
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
            raise ConfigError(f"{_named(path)}: {exc}") from None
        coverage = (profile.get(OURS) or {}).get(COVERAGE_FIELD)
        # A whole profile may say 0 (its run's drafter found nothing to draft), which is nothing to simulate.
        require(
            coverage != 0,
            f"{_named(path)}: {OURS}.{COVERAGE_FIELD} is 0, its run drafted at no step: take a profile of a run that "
            "drafted",
        )
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
