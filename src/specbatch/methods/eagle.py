"""EAGLE: a one-layer head reads the target's last hidden state and its embeddings, drafts k tokens."""

from __future__ import annotations

from specbatch.methods.checkpoint_checks import CHECKPOINT_CHECKS
from specbatch.methods.method import CHECKPOINT_KNOBS, DRAFTER_KNOBS, PARALLEL_KNOBS, VERIFY_KNOBS, Method

METHOD = Method(
    name="eagle",
    rank=40,
    knobs=CHECKPOINT_KNOBS + DRAFTER_KNOBS + VERIFY_KNOBS + PARALLEL_KNOBS,
    checkpoint="an EAGLE head",
    checks=CHECKPOINT_CHECKS,
    stand_in="eagle",
    chain_drafting=True,
)
