"""DFlash: a block-diffusion draft (Qwen3-style layers, non-causal attention) fed by the hidden states of the target
layers its config.json names; the mask token fills the block's slots, and the whole block is drafted in one pass."""

from __future__ import annotations

from typing import Any

from specbatch.common.errors import ConfigError
from specbatch.methods.checkpoint_checks import (
    CHECKPOINT_CHECKS,
    block_draft_key,
    checked_block_draft,
    config_value,
    target_config,
    warn_draft_context,
)
from specbatch.methods.method import ALWAYS_PARALLEL, CHECKPOINT_KNOBS, DRAFTER_KNOBS, VERIFY_KNOBS, JobLike, Method


def check_block_draft(job: JobLike) -> None:
    """A DFlash draft fits what vLLM 0.32 reads from its config.json, checked before loading instead of failing
    inside the engine: the token of its block's slots, its block size against k, and the target layers it reads."""
    checked = checked_block_draft(job)
    if checked is not None:
        _check_target_fit(job, *checked)


def _check_target_fit(job: JobLike, draft: dict[str, Any], where: str) -> None:
    """The target layers a DFlash draft reads exist in the target, once each, and are as wide as its input."""
    model = job.model
    target = target_config(job)
    layer_ids = block_draft_key(draft, "target_layer_ids")
    if layer_ids is None and draft.get("eagle_aux_hidden_state_layer_ids") is None:
        # vLLM (get_eagle3_aux_layers_from_config) would fall back to the target's EAGLE3 default layers, which
        # the draft was not trained on and whose count need not match its input projection.
        raise ConfigError(
            f"spec=dflash: {where} names no dflash_config.target_layer_ids (the target layers whose hidden states "
            "the draft reads): use a DFlash checkpoint trained for this target"
        )
    if target is None:
        return
    layers = int(config_value(target, "num_hidden_layers") or 0)
    if layer_ids is not None and layers:
        # vLLM reads target layer t after that layer (aux id t + 1, v1/worker/gpu_model_runner.py) and drops
        # repeats (interfaces.py: sorted(set(layers))), which would starve the draft's input projection.
        bad = [i for i in layer_ids if not isinstance(i, int) or not 0 <= i < layers]
        if bad or len(set(layer_ids)) != len(layer_ids):
            raise ConfigError(
                f"spec=dflash: {where} reads target layers {layer_ids}, but model.path={model.path} has "
                f"{layers} layers (ids 0..{layers - 1}, each once): this draft was trained for another target; "
                "use one trained for this model (see conf/model_spec/)"
            )
    wanted = draft.get("target_hidden_size") or config_value(draft, "hidden_size")
    width = config_value(target, "hidden_size")
    if wanted is not None and width is not None and wanted != width:
        raise ConfigError(
            f"spec=dflash: {where} expects target hidden states of width {wanted} (target_hidden_size), but "
            f"model.path={model.path} has hidden_size={width}: use a DFlash draft trained for this target"
        )


METHOD = Method(
    name="dflash",
    rank=70,
    knobs=CHECKPOINT_KNOBS + DRAFTER_KNOBS + VERIFY_KNOBS,
    checkpoint="a DFlash draft",
    checks=(*CHECKPOINT_CHECKS, check_block_draft, warn_draft_context),
    foreign_knob_hints=ALWAYS_PARALLEL,
    stand_in="dflash",
)
