"""The ``spec`` section: which speculative method runs, with its k and its own knobs (group ``spec/``).

Which knob belongs to which method, and the method-specific rules, come from the registry in
:mod:`specbatch.config.methods`; this module checks the values and turns them into vLLM's ``speculative_config``.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from dataclasses import dataclass
from typing import Any

from specbatch.config.errors import ConfigError, require
from specbatch.config.methods import METHODS, SpecMethod, methods_owning, spec_label


class DraftSampleMethod(enum.StrEnum):
    """How a draft model picks its proposals (vLLM 0.32 ``draft_sample_method``)."""

    greedy = "greedy"
    probabilistic = "probabilistic"


# vLLM accepts larger k, but beyond this every method spends more on rejected drafts than it saves.
MAX_SPECULATIVE_TOKENS = 16
# Fields of every method (k means nothing to the baseline, which the k check says itself); the others are knobs.
_SHARED_FIELDS = ("method", "num_speculative_tokens")


@dataclass
class SpecConfig:
    """Speculative decoding method and its own knobs (group ``spec/``).

    Which checkpoint goes with which target is not here: conf/model_spec/<model>_<spec>.yaml sets spec.model
    for the selected model, and ``spec.model=...`` on the command line always wins.
    """

    method: SpecMethod = SpecMethod.none
    # Tokens proposed per step (k); null only for method=none.
    num_speculative_tokens: int | None = None
    # draft_model / eagle / eagle3: the draft checkpoint or head (local folder or hub id).
    model: str | None = None
    # Hub revision of spec.model.
    revision: str | None = None
    # Model-based methods: GPUs the draft runs on; vLLM accepts 1 or the target's tensor_parallel_size.
    draft_tensor_parallel_size: int | None = None
    # Model-based methods: greedy or probabilistic proposals (null: vLLM's default, greedy).
    draft_sample_method: DraftSampleMethod | None = None
    # n-gram (prompt lookup): shortest and longest suffix of the context looked up in the prompt.
    prompt_lookup_min: int | None = None
    prompt_lookup_max: int | None = None
    # Suffix decoding (arctic-inference): tree depth, finished requests remembered, how far to speculate
    # relative to the matched length, and the least probability a drafted token may have.
    suffix_decoding_max_tree_depth: int | None = None
    suffix_decoding_max_cached_requests: int | None = None
    suffix_decoding_max_spec_factor: float | None = None
    suffix_decoding_min_token_prob: float | None = None

    def __post_init__(self) -> None:
        k = self.num_speculative_tokens
        if self.method is SpecMethod.none:
            require(
                k is None,
                "spec.num_speculative_tokens is set but spec.method=none drafts nothing: "
                "drop the override or choose a method, e.g. spec=ngram",
            )
        else:
            require(
                k is not None and 1 <= k <= MAX_SPECULATIVE_TOKENS,
                f"spec.num_speculative_tokens={k} is out of range for spec.method={self.method.value}: "
                f"use an integer from 1 to {MAX_SPECULATIVE_TOKENS}, e.g. spec.num_speculative_tokens=3",
            )
        self._check_own_knobs()
        if self.method is SpecMethod.ngram:
            lo, hi = self.prompt_lookup_min, self.prompt_lookup_max
            require(
                lo is not None and hi is not None,
                "spec=ngram needs spec.prompt_lookup_min and spec.prompt_lookup_max, e.g. 2 and 4",
            )
            require(lo >= 1, f"spec.prompt_lookup_min={lo} must be 1 or more, e.g. spec.prompt_lookup_min=2")
            require(
                hi >= lo,
                f"spec.prompt_lookup_max={hi} is below spec.prompt_lookup_min={lo}: "
                f"set spec.prompt_lookup_max to {lo} or more",
            )
        for key in (
            "suffix_decoding_max_tree_depth",
            "suffix_decoding_max_cached_requests",
            "draft_tensor_parallel_size",
        ):
            value = getattr(self, key)
            require(value is None or value >= 1, f"spec.{key}={value} must be 1 or more (or null for vLLM's default)")
        factor, prob = self.suffix_decoding_max_spec_factor, self.suffix_decoding_min_token_prob
        require(factor is None or factor > 0, f"spec.suffix_decoding_max_spec_factor={factor} must be above 0")
        require(prob is None or 0 <= prob <= 1, f"spec.suffix_decoding_min_token_prob={prob} must be in [0, 1]")
        if self.model is not None:
            require(bool(self.model.strip()), "spec.model is empty: set it to a folder or hub id, or to null")

    @classmethod
    def knob_applies(cls, method: SpecMethod, knob: str) -> bool:
        """Whether ``spec.<knob>`` means anything for ``method`` (k means nothing to the baseline)."""
        if knob == "num_speculative_tokens":
            return method is not SpecMethod.none
        owners = knob_owners().get(knob)
        return owners is None or method in owners

    def _check_own_knobs(self) -> None:
        for knob, owners in knob_owners().items():
            if self.method not in owners and getattr(self, knob) is not None:
                names = ", ".join(sorted(m.value for m in owners))
                hint = METHODS[self.method].foreign_knob_hints.get(knob)
                if hint is None:
                    hint = f"remove it or choose one of those methods (spec={sorted(m.value for m in owners)[0]})"
                raise ConfigError(
                    f"spec.{knob} is not an option of spec.method={self.method.value} (it belongs to {names}): {hint}"
                )

    @property
    def k(self) -> int | None:
        return self.num_speculative_tokens

    @property
    def label(self) -> str:
        """Readable method label, e.g. ``ngram-k3`` or ``none``."""
        return spec_label(self.method.value, self.k)

    def to_vllm(self) -> dict[str, Any] | None:
        """The ``speculative_config`` dict for ``vllm.LLM``; None for the baseline."""
        if self.method is SpecMethod.none:
            return None
        out: dict[str, Any] = {"method": self.method.value, "num_speculative_tokens": self.k}
        for knob, owners in knob_owners().items():
            value = getattr(self, knob)
            if self.method in owners and value is not None:
                out[knob] = value.value if isinstance(value, enum.Enum) else value
        return out


@functools.cache
def knob_owners() -> dict[str, frozenset[SpecMethod]]:
    """Each optional ``spec.<knob>`` → the methods it belongs to, in the schema's field order (so messages and the
    ``speculative_config`` list knobs the way the schema does)."""
    return {f.name: methods_owning(f.name) for f in dataclasses.fields(SpecConfig) if f.name not in _SHARED_FIELDS}
