"""MTP: the target drafts with its own built-in multi-token-prediction layers (DeepSeek-V3, MiMo, GLM-4.5, Qwen3-Next,
Qwen3.5), so there is no checkpoint to name."""

from __future__ import annotations

from typing import Any

from specbatch.common.errors import ConfigError
from specbatch.methods.checkpoint_checks import config_value, target_config
from specbatch.methods.method import DRAFTER_KNOBS, VERIFY_KNOBS, JobLike, Method

# config.json keys that count a model's built-in multi-token-prediction layers (DeepSeek-V3, MiMo, GLM-4.5, Qwen3-Next
# use the first; Qwen3.5 the second; vLLM's own MTP draft configs the third).
MTP_LAYER_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "n_predict")


def mtp_layer_count(config: dict[str, Any]) -> int:
    return max(int(config_value(config, key) or 0) for key in MTP_LAYER_KEYS)


def check_mtp_layers(job: JobLike) -> None:
    """An MTP target has MTP layers, and k fits their number."""
    spec, model = job.spec, job.model
    target = target_config(job)
    if target is None:
        return
    layers = mtp_layer_count(target)
    if layers == 0:
        raise ConfigError(
            f"spec=mtp needs a target with built-in MTP layers, but the config.json of model.path={model.path} "
            f"has none ({', '.join(MTP_LAYER_KEYS)} all absent or 0). Choose a model trained with MTP "
            "(model=mimo_7b_base on a GPU, model=tiny_mimo to try the mechanics) or another method (spec=ngram)."
        )
    k = spec.num_speculative_tokens or 0
    if k > layers and k % layers:
        raise ConfigError(
            f"spec.num_speculative_tokens={k} does not fit a target with {layers} MTP layer(s): vLLM needs k "
            f"at most {layers} or a multiple of {layers}, e.g. spec.num_speculative_tokens={layers}"
        )


METHOD = Method(
    name="mtp",
    rank=60,
    knobs=DRAFTER_KNOBS + VERIFY_KNOBS,
    checks=(check_mtp_layers,),
    foreign_knob_hints={"model": "mtp drafts with the target's own MTP layers: remove spec.model"},
    # The stand-in is a target of its own (model=tiny_mimo), with one MTP layer.
    stand_in="mtp_target",
)
