"""A smaller model of the target's family drafts k tokens, one pass each (or all k in one pass: PARD drafts)."""

from __future__ import annotations

from typing import Any

from specbatch.common.errors import require
from specbatch.methods.checkpoint_checks import CHECKPOINT_CHECKS, warn_draft_context
from specbatch.methods.method import CHECKPOINT_KNOBS, DRAFTER_KNOBS, PARALLEL_KNOBS, VERIFY_KNOBS, Method


def check_heterogeneous_vocab(spec: Any) -> None:
    """A draft with another tokenizer proposes its greedy tokens only: vLLM 0.32 maps token ids between the two
    vocabularies, not probability rows (config/speculative.py refuses any other draft_sample_method with it)."""
    method = spec.draft_sample_method
    require(
        not spec.use_heterogeneous_vocab or method is None or method.value == "greedy",
        f"spec.use_heterogeneous_vocab=true with spec.draft_sample_method={method and method.value}: a draft with "
        "another tokenizer proposes greedy tokens only (vLLM maps token ids between the vocabularies, not "
        "probabilities); drop spec.draft_sample_method or spec.use_heterogeneous_vocab",
    )


METHOD = Method(
    name="draft_model",
    rank=30,
    # A draft as one GGUF file (spec.draft_gguf) is a knob of the backend that loads GGUF (backends/llama_cpp).
    knobs=(*CHECKPOINT_KNOBS, *DRAFTER_KNOBS, *VERIFY_KNOBS, *PARALLEL_KNOBS, "use_heterogeneous_vocab"),
    checkpoint="a draft model",
    checks=(*CHECKPOINT_CHECKS, warn_draft_context),
    knob_checks=(check_heterogeneous_vocab,),
    stand_in="draft",
    chain_drafting=True,
)
