"""DSpark: a block draft with a Markov head over the block (Qwen3, Gemma4, DeepSeek-V4 drafts), fed by the target's
hidden states. (That vLLM 0.32 runs it only on a GPU is vLLM's fact: specbatch.backends.vllm.methods.)"""

from __future__ import annotations

from typing import Any

from specbatch.common.errors import ConfigError, require
from specbatch.methods.checkpoint_checks import (
    check_draft_source,
    checked_block_draft,
    config_value,
    target_config,
    warn_draft_context,
)
from specbatch.methods.method import ALWAYS_PARALLEL, CHECKPOINT_KNOBS, DRAFTER_KNOBS, VERIFY_KNOBS, JobLike, Method

# Architectures vLLM 0.32 runs as DSpark drafts of their own (config/speculative.py, SpeculativeConfig.__post_init__);
# any other config.json is taken for DeepSeek-V4's DSpark stages and rewritten into a copy of the target.
DSPARK_ARCHITECTURES = (
    "Qwen3DSparkModel",
    "Qwen3OmniDSparkModel",
    "Gemma4DSparkModel",
    "K3DSparkModel",
    "DSparkDraftModel",
)
# The Markov-head top-k exists only in these (config/speculative.py: "dspark_draft_topk is only supported by ...").
DSPARK_TOPK_ARCHITECTURES = ("Qwen3DSparkModel", "Qwen3OmniDSparkModel")


def check_topk(spec: Any) -> None:
    """spec.dspark_draft_topk is a count, and needs the draft on one GPU ("Requires draft tensor parallel size 1")."""
    topk = spec.dspark_draft_topk
    require(topk is None or topk >= 1, f"spec.dspark_draft_topk={topk} must be 1 or more (or null for vLLM's default)")
    require(
        topk is None or spec.draft_tensor_parallel_size in (None, 1),
        f"spec.dspark_draft_topk={topk} needs the draft on one GPU, but "
        f"spec.draft_tensor_parallel_size={spec.draft_tensor_parallel_size}: set "
        "spec.draft_tensor_parallel_size=1 or drop spec.dspark_draft_topk",
    )


def check_block_draft(job: JobLike) -> None:
    """A DSpark draft fits what vLLM 0.32 reads from its config.json: the token of its block's slots, its block size
    against k, a vocabulary at least the target's, and an architecture vLLM runs as a draft of its own."""
    checked = checked_block_draft(job)
    if checked is None:
        return
    draft, where = checked
    spec = job.spec
    _check_vocabulary(job, draft, where)
    architectures = draft.get("architectures") or []
    if not set(architectures) & set(DSPARK_ARCHITECTURES):
        raise ConfigError(
            f"spec=dspark: {where} has architectures={architectures}, none of {', '.join(DSPARK_ARCHITECTURES)}: "
            "vLLM 0.32 would take it for DeepSeek-V4's DSpark stages and build a copy of the target from it. "
            "Point spec.model at a DSpark draft (e.g. deepseek-ai/dspark_qwen3_4b_block7)"
        )
    topk = spec.dspark_draft_topk
    if topk is not None and not set(architectures) & set(DSPARK_TOPK_ARCHITECTURES):
        raise ConfigError(
            f"spec.dspark_draft_topk={topk}: vLLM 0.32 has it only for {' and '.join(DSPARK_TOPK_ARCHITECTURES)} "
            f"drafts, and {where} has architectures={architectures}: drop spec.dspark_draft_topk"
        )


def _check_vocabulary(job: JobLike, draft: dict[str, Any], where: str) -> None:
    """A DSpark draft reads at least the target's vocabulary: vLLM 0.32 lets its input vocabulary be larger (with
    embeddings of its own) and its drafted one smaller (with a d2t map), never the input smaller."""
    model = job.model
    target = target_config(job)
    ours, theirs = config_value(draft, "vocab_size"), config_value(target, "vocab_size") if target else None
    if isinstance(ours, int) and isinstance(theirs, int) and ours < theirs:
        raise ConfigError(
            f"spec=dspark: {where} has vocab_size={ours}, below the {theirs} of model.path={model.path}: it was "
            "trained for another tokenizer; use a DSpark draft trained for this target (see conf/model_spec/)"
        )


METHOD = Method(
    name="dspark",
    rank=80,
    knobs=(*CHECKPOINT_KNOBS, *DRAFTER_KNOBS, *VERIFY_KNOBS, "dspark_draft_topk"),
    checkpoint="a DSpark draft",
    knob_checks=(check_topk,),
    # Its vocabulary is checked by check_block_draft: a DSpark draft may read a larger one than the target's (its own
    # embeddings, e.g. for its noise token: vLLM's qwen3_dspark.py), so the exact-match check does not apply.
    checks=(check_draft_source, check_block_draft, warn_draft_context),
    foreign_knob_hints=ALWAYS_PARALLEL,
)
