"""EAGLE3: a head fed by the hidden states of three target layers, with a draft vocabulary of its own."""

from __future__ import annotations

from specbatch.methods.checkpoint_checks import CHECKPOINT_CHECKS
from specbatch.methods.method import CHECKPOINT_KNOBS, DRAFTER_KNOBS, PARALLEL_KNOBS, VERIFY_KNOBS, Method

METHOD = Method(
    name="eagle3",
    rank=50,
    knobs=CHECKPOINT_KNOBS + DRAFTER_KNOBS + VERIFY_KNOBS + PARALLEL_KNOBS,
    checkpoint="an EAGLE3 head",
    checks=CHECKPOINT_CHECKS,
    stand_in="eagle3",
    chain_drafting=True,
)
