"""Medusa: k heads on the target's last hidden state, head i proposing the token i + 1 positions ahead, all in one
pass and top-1 only (vLLM 0.32: ``v1/spec_decode/medusa.py``, ``model_executor/models/medusa.py``).

Its checkpoint ("a Medusa head") holds ``blocks.<i>.layers.<j>`` residual blocks and ``lm_heads.<i>`` per head;
FasterDecoding's older files (``<i>.<j>.linear``, no model_type, no vocab_size) are read too. Its config.json
counts the heads in a key with "num" and "heads" in its name (num_heads, medusa_num_heads) and its hidden size
must be the target's. The CPU stand-in is the tiny family's random head (``tiny/medusa``, 3 heads).
"""

from __future__ import annotations

from typing import Any

from specbatch.common.errors import ConfigError
from specbatch.methods.checkpoint_checks import check_draft_source, config_value, draft_config, target_config
from specbatch.methods.method import CHECKPOINT_KNOBS, VERIFY_KNOBS, JobLike, Method


def head_count(config: dict[str, Any]) -> int | None:
    """The number of heads, read as vLLM's MedusaConfig.from_pretrained reads it (a key with "num" and "heads")."""
    for key, value in config.items():
        if "num" in key and "heads" in key and isinstance(value, int):
            return value
    return None


def check_medusa_head(job: JobLike) -> None:
    """The head fits the target (its width and, when it names one, its vocabulary) and has a head per drafted
    token: each head drafts one position, so k beyond them has nothing to draft it."""
    spec, model = job.spec, job.model
    head, target = draft_config(job), target_config(job)
    if head is None:
        return
    where = f"the config.json of spec.model={spec.model}"
    heads = head_count(head)
    k = spec.num_speculative_tokens or 0
    if heads is not None and k > heads:
        raise ConfigError(
            f"spec.num_speculative_tokens={k} but {where} has {heads} Medusa heads (one per drafted token): set "
            f"spec.num_speculative_tokens={heads} or less"
        )
    if target is None:
        return
    for key in ("hidden_size", "vocab_size"):
        ours, theirs = head.get(key), config_value(target, key)
        # An older head without vocab_size takes the target's (vLLM aligns it); a different one does not load.
        if ours is not None and theirs is not None and ours != theirs:
            raise ConfigError(
                f"spec=medusa: {where} has {key}={ours} but model.path={model.path} has {key}={theirs}: the head "
                "was trained for another target; use a Medusa head trained for this model (see conf/model_spec/)"
            )


METHOD = Method(
    name="medusa",
    rank=90,
    knobs=CHECKPOINT_KNOBS + VERIFY_KNOBS,
    checkpoint="a Medusa head",
    checks=(check_draft_source, check_medusa_head),
    # Read in vLLM 0.32's source (MedusaProposer.propose), as suffix's refusal was measured.
    k_schedule_refusal=(
        "vLLM 0.32's Medusa proposer asserts that the k it is asked for equals num_speculative_tokens "
        "(vllm/v1/spec_decode/medusa.py), so the engine would die at the first step whose batch size has a smaller k"
    ),
    stand_in="medusa",
)
