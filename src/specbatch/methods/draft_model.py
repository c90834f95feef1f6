"""A smaller model of the target's family drafts k tokens, one pass each (or all k in one pass: PARD drafts)."""

from __future__ import annotations

from specbatch.methods.checkpoint_checks import CHECKPOINT_CHECKS, warn_draft_context
from specbatch.methods.method import CHECKPOINT_KNOBS, DRAFTER_KNOBS, PARALLEL_KNOBS, Method

METHOD = Method(
    name="draft_model",
    rank=30,
    # A draft as one GGUF file (spec.draft_gguf) is a knob of the backend that loads GGUF (backends/llama_cpp).
    knobs=(*CHECKPOINT_KNOBS, *DRAFTER_KNOBS, *PARALLEL_KNOBS),
    checkpoint="a draft model",
    checks=(*CHECKPOINT_CHECKS, warn_draft_context),
    stand_in="draft",
    chain_drafting=True,
)
