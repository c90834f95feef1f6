"""Checks several checkpoint methods share, run before the engine loads: the draft is there, shares the target's
vocabulary, names its parallel-drafting token, fits a block, and is used within its own context.

What a checkpoint's config.json says comes from specbatch.assets.checkpoints, its one reader. Each failure is a
ConfigError naming the key to change and how.
"""

from __future__ import annotations

import logging
from typing import Any

from specbatch.assets.checkpoints import check_model_source, read_model_config
from specbatch.common.errors import ConfigError
from specbatch.methods.method import JobLike

log = logging.getLogger(__name__)


def config_value(config: dict[str, Any], key: str) -> Any:
    """A key of the config or, for multimodal wrappers, of its text_config, or, for a head in speculators' format
    (what ``speculators train`` and jobs/train_drafter.py write), of its transformer_layer_config, where vLLM reads
    the draft's own layer from (vllm/transformers_utils/configs/speculators)."""
    if key in config:
        return config[key]
    for nested in ("text_config", "transformer_layer_config"):
        if isinstance(config.get(nested), dict) and key in config[nested]:
            return config[nested][key]
    return None


def target_config(job: JobLike) -> dict[str, Any] | None:
    model = job.model
    return read_model_config("model.path", model.path, model.revision)


def draft_config(job: JobLike) -> dict[str, Any] | None:
    spec = job.spec
    return read_model_config("spec.model", spec.model, spec.revision) if spec.model else None


def check_draft_source(job: JobLike) -> None:
    """The draft checkpoint exists here (or may be downloaded). model.path and model.tokenizer are checked by
    prompts.load_tokenizer, their first reader, which runs before this."""
    if job.spec.model:
        check_model_source("spec.model", job.spec.model, job.spec.revision)


def check_draft_vocabulary(job: JobLike) -> None:
    """The draft or head fits the target: the same vocabulary."""
    from specbatch.methods import CHECKPOINT_KIND, METHODS  # the registry is built from the modules importing this

    spec, model = job.spec, job.model
    if getattr(spec, "use_heterogeneous_vocab", None):
        return  # vLLM maps the draft's tokens to the target's by their text
    target = target_config(job)
    draft = read_model_config("spec.model", spec.model, spec.revision)
    if target is not None and draft is not None:
        target_vocab, draft_vocab = config_value(target, "vocab_size"), config_value(draft, "vocab_size")
        if target_vocab != draft_vocab:
            kind = CHECKPOINT_KIND[spec.method]
            other = " (or set spec.use_heterogeneous_vocab=true: vLLM maps its tokens to the target's)"
            raise ConfigError(
                f"spec.model={spec.model} has vocab_size={draft_vocab} but model.path={model.path} has "
                f"vocab_size={target_vocab}: {kind} must share the target's tokenizer. Use one trained for "
                f"this target (see conf/model_spec/) or a smaller model of the same family"
                f"{other if 'use_heterogeneous_vocab' in METHODS[spec.method].knobs else ''}."
            )


# config.json keys of the token vLLM 0.32 feeds into the slots a parallel drafter fills
# (LLMBaseProposer._init_parallel_drafting_params): one must be there.
PARALLEL_DRAFTING_TOKEN_KEYS = ("mask_token_id", "pard_token", "ptd_token_id")


def check_parallel_drafting_token(job: JobLike) -> None:
    """A parallel drafter was trained for it: its config.json names the token of the slots it drafts in parallel."""
    spec = job.spec
    if not spec.parallel_drafting or not spec.model:
        return
    draft = read_model_config("spec.model", spec.model, spec.revision)
    if draft is None:
        return
    if not any(config_value(draft, key) is not None for key in PARALLEL_DRAFTING_TOKEN_KEYS):
        raise ConfigError(
            f"spec.parallel_drafting=true but the config.json of spec.model={spec.model} names no parallel-drafting "
            f"token ({', '.join(PARALLEL_DRAFTING_TOKEN_KEYS)}): only drafters trained for it (PARD drafts, P-EAGLE "
            "heads) draft in parallel. Drop spec.parallel_drafting or use such a checkpoint"
        )


# A checkpoint method: its checkpoint must exist here and share the target's vocabulary, and a parallel drafter
# must name its mask token. Drafts with a positional range of their own (not EAGLE heads, whose range vLLM raises to
# the target's, vllm#48894) also warn when requests may outrun it (warn_draft_context).
CHECKPOINT_CHECKS = (check_draft_source, check_draft_vocabulary, check_parallel_drafting_token)


def block_draft_key(draft: dict[str, Any], *keys: str) -> Any:
    """The first of ``keys`` the draft's config.json sets, in its dflash_config first (where DFlash drafts keep
    them and vLLM looks first), then at the top level."""
    nested = draft.get("dflash_config") or {}
    for key in keys:
        for where in (nested, draft):
            if where.get(key) is not None:
                return where[key]
    return None


def checked_block_draft(job: JobLike) -> tuple[dict[str, Any], str] | None:
    """A block draft's (DFlash, DSpark) config.json and how messages name it, after what every block draft must
    have: the token of its block's slots and a block size that k fits. None when there is nothing to check."""
    spec = job.spec
    draft = draft_config(job)
    if draft is None or "speculators_model_type" in draft:
        # Unreadable (the engine will say why), or a speculators-format config that vLLM converts itself.
        return None
    where = f"the config.json of spec.model={spec.model}"
    method = spec.method.value
    # LLMBaseProposer._init_parallel_drafting_params (v1/spec_decode/llm_base_proposer.py) raises without one.
    if block_draft_key(draft, "mask_token_id", "dspark_noise_token_id") is None:
        raise ConfigError(
            f"spec={method}: {where} names no token for the slots of its block (dflash_config.mask_token_id, "
            f"mask_token_id or dspark_noise_token_id), which vLLM 0.32 needs to draft: use a {method} checkpoint "
            "trained for this target (see conf/model_spec/)"
        )
    block = block_draft_key(draft, "block_size", "dspark_block_size")
    k = spec.num_speculative_tokens or 0
    if isinstance(block, int) and k > block:
        # The draft was trained on blocks of this size: positions past it were never trained (and vLLM's DSpark
        # takes the block size as k; Qwen3-Omni DSpark requires k to equal it).
        raise ConfigError(
            f"spec.num_speculative_tokens={k} is more than the block of {block} the {method} draft was trained on "
            f"({where}: block_size={block}): set spec.num_speculative_tokens={block} or less"
        )
    return draft, where


def warn_draft_context(job: JobLike) -> None:
    """Warn before loading when requests may run past the draft's own context: vLLM caps the draft's max_model_len
    at its config's max_position_embeddings (SpeculativeConfig._maybe_override_draft_max_model_len) and stops
    drafting for a request beyond it, so acceptance falls towards 0 there (vllm#58080) with nothing in the run's
    config saying why. Each run records the value vLLM resolved (acceptance_settings.draft_max_model_len)."""
    spec, model = job.spec, job.model
    draft = draft_config(job)
    positions = config_value(draft, "max_position_embeddings") if draft is not None else None
    if not isinstance(positions, int) or positions >= model.max_model_len:
        return
    log.warning(
        "the draft's max_model_len is %d (max_position_embeddings of spec.model=%s), but model.max_model_len=%d lets "
        "a prompt plus sampling.max_tokens=%d run to %d tokens: past %d tokens vLLM stops drafting for a request "
        "and its acceptance falls (vllm#58080). To measure the draft where it works, keep requests within it "
        "(model.max_model_len=%d)",
        positions,
        spec.model,
        model.max_model_len,
        job.sampling.max_tokens,
        model.max_model_len,
        positions,
        positions,
    )
