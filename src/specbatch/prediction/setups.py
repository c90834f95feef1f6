"""The set-ups a prediction replays: n-gram and suffix decoding with their knobs, the defaults taken from the run,
and the parsing of jobs/predict.py's arguments (each refusal names its flag). The methods' own facts (their
default windows, k and knob defaults, which set-up replays them) are in their modules (specbatch.methods)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from specbatch.methods import METHODS as ALL_METHODS
from specbatch.methods import ngram, suffix

DEFAULT_NGRAM_WINDOW = ngram.DEFAULT_WINDOW
DEFAULT_NGRAM_KS = ngram.DEFAULT_PREDICTED_KS
DEFAULT_SUFFIX_KS = suffix.DEFAULT_PREDICTED_KS
SUFFIX_DEFAULTS = suffix.DEFAULTS


@dataclass(frozen=True)
class NgramSetup:
    """spec=ngram with k draft tokens, looking up suffixes of min_n..max_n tokens."""

    k: int
    min_n: int
    max_n: int

    @property
    def label(self) -> str:
        return f"{self.method}-k{self.k}-n{self.min_n}-{self.max_n}"

    method = ngram.METHOD.name


@dataclass(frozen=True)
class SuffixSetup:
    """spec=suffix with at most k draft tokens (vLLM's suffix_decoding_* knobs)."""

    k: int
    max_tree_depth: int = SUFFIX_DEFAULTS["max_tree_depth"]
    max_cached_requests: int = SUFFIX_DEFAULTS["max_cached_requests"]
    max_spec_factor: float = SUFFIX_DEFAULTS["max_spec_factor"]
    min_token_prob: float = SUFFIX_DEFAULTS["min_token_prob"]

    @property
    def label(self) -> str:
        return f"{self.method}-k{self.k}-d{self.max_tree_depth}-f{self.max_spec_factor:g}"

    method = suffix.METHOD.name


Setup = NgramSetup | SuffixSetup
# The methods replay can predict (those whose module names a replay set-up: they draft without a checkpoint).
METHODS = tuple(m.value for m, entry in ALL_METHODS.items() if entry.replay)


def default_setups(
    config: dict[str, Any],
    ngram_ks: tuple[int, ...] = DEFAULT_NGRAM_KS,
    windows: tuple[tuple[int, int], ...] = (),
    suffix_ks: tuple[int, ...] = DEFAULT_SUFFIX_KS,
) -> list[Setup]:
    """The set-ups to predict: n-gram at each k and window (the run's own window when it ran n-gram), suffix at each
    k with the run's own suffix knobs when it ran suffix (vLLM's defaults otherwise)."""
    spec = config["spec"]
    if not windows:
        own = (spec.get("prompt_lookup_min"), spec.get("prompt_lookup_max"))
        windows = (own,) if spec["method"] == NgramSetup.method and None not in own else (DEFAULT_NGRAM_WINDOW,)
    setups: list[Setup] = [NgramSetup(k, lo, hi) for lo, hi in windows for k in ngram_ks]
    knobs = _suffix_knobs(spec) if spec["method"] == SuffixSetup.method else {}
    setups += [SuffixSetup(k, **knobs) for k in suffix_ks]
    return setups


def _suffix_knobs(spec: dict[str, Any]) -> dict[str, Any]:
    """The suffix knobs a run's spec set (spec.suffix_decoding_*), by SuffixSetup's names; vLLM's for the rest."""
    return {
        name: spec[f"suffix_decoding_{name}"]
        for name in SUFFIX_DEFAULTS
        if spec.get(f"suffix_decoding_{name}") is not None
    }


def setup_of(config: dict[str, Any]) -> Setup | None:
    """The set-up a run ran (its recorded config), when replay can predict it: n-gram or suffix with a fixed k."""
    spec = config["spec"]
    k = spec.get("num_speculative_tokens")
    if not k or spec.get("k_schedule"):
        return None
    if spec["method"] == NgramSetup.method:
        return NgramSetup(k, spec["prompt_lookup_min"], spec["prompt_lookup_max"])
    if spec["method"] == SuffixSetup.method:
        return SuffixSetup(k, **_suffix_knobs(spec))
    return None


def parse_ks(flag: str):
    """An argparse type for ``flag``'s k values, e.g. 1,2,3."""

    def parse(text: str) -> tuple[int, ...]:
        try:
            ks = tuple(int(k) for k in text.split(",") if k.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} takes k values separated by commas, e.g. 1,2,3") from None
        if not ks or min(ks) < 1:
            raise argparse.ArgumentTypeError(f"{flag}={text}: every k must be 1 or more, e.g. {flag} 1,2,3")
        return ks

    return parse


def parse_methods(text: str) -> tuple[str, ...]:
    """An argparse type for --methods."""
    methods = tuple(m.strip() for m in text.split(",") if m.strip())
    if not methods or any(m not in METHODS for m in methods):
        raise argparse.ArgumentTypeError(
            f"--methods={text}: replay knows {' and '.join(METHODS)} (the methods that draft without a checkpoint)"
        )
    return methods


def parse_window(text: str) -> tuple[int, int]:
    """An argparse type for --ngram-window MIN-MAX."""
    low, _, high = text.partition("-")
    try:
        window = (int(low), int(high or low))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--ngram-window={text}: give MIN-MAX, e.g. --ngram-window 2-4") from None
    if window[0] < 1 or window[1] < window[0]:
        raise argparse.ArgumentTypeError(f"--ngram-window={text}: need 1 <= MIN <= MAX, e.g. --ngram-window 2-4")
    return window
