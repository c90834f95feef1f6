"""Checks that need installed packages or the checkpoints' config.json, run before the slow engine build.

The config dataclasses already refused what can be judged from the config alone; here we look at what is on
disk (or on the hub): is the draft checkpoint a folder or a hub id that can be loaded here, is the suffix-decoding
package there, does the draft share the target's vocabulary, does an MTP target really have MTP layers. Each
failure names the key to change and how.
"""

from __future__ import annotations

import importlib.util
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specbatch.config import CHECKPOINT_KIND, METHODS, ConfigError, JobConfig

log = logging.getLogger(__name__)

# config.json keys that count a model's built-in multi-token-prediction layers (DeepSeek-V3, MiMo, GLM-4.5, Qwen3-Next
# use the first; Qwen3.5 the second; vLLM's own MTP draft configs the third).
MTP_LAYER_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "n_predict")

# Files whose presence in the Hugging Face cache shows a hub checkpoint (or tokenizer) was downloaded before.
_CACHE_MARKERS = ("config.json", "tokenizer_config.json", "tokenizer.json")


def check_model_source(key: str, value: str, revision: str | None = None, *, checkpoint: bool = True) -> None:
    """``value`` (of config ``key``) is a local folder (with config.json for a ``checkpoint``) or a hub id that
    can be loaded here; otherwise a ConfigError that names the key, instead of an OS error from deep in a loader.

    A hub id that is not cached is refused only in offline mode: with network it is downloaded as usual.
    """
    from huggingface_hub import constants, try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    folder = Path(value).expanduser()
    if folder.is_dir():
        if checkpoint and not (folder / "config.json").is_file():
            raise ConfigError(
                f"{key}={value} is a folder without config.json: point it at a Hugging Face checkpoint folder "
                "(config.json, tokenizer files and weights)"
            )
        return
    if folder.exists():
        raise ConfigError(f"{key}={value} is a file: point it at a Hugging Face checkpoint folder or a hub id")
    looks_like_a_path = value.startswith(("/", "~", ".")) or "\\" in value
    try:
        validate_repo_id(value)
    except HFValidationError:
        looks_like_a_path = True
    if looks_like_a_path:
        raise ConfigError(
            f"{key}={value}: no such folder, and not a hub id (org/name) either: point it at an existing local "
            "Hugging Face folder (holding config.json) or a hub id such as HuggingFaceTB/SmolLM2-135M-Instruct"
        )
    cached = any(isinstance(try_to_load_from_cache(value, f, revision=revision), str) for f in _CACHE_MARKERS)
    if not cached and constants.HF_HUB_OFFLINE:
        raise ConfigError(
            f"{key}={value} is not a local folder, and as a hub id it is not available offline (HF_HUB_OFFLINE=1): "
            "it is not in the Hugging Face cache. Download it where there is network (hf download "
            f"{value} --local-dir <folder>) and set {key}=<folder>, or run with network access"
        )


def read_model_config(path_or_id: str, revision: str | None = None) -> dict[str, Any] | None:
    """config.json of a local folder, or of a hub repo (only config.json is fetched); None when unreachable."""
    folder = Path(path_or_id).expanduser()
    if folder.is_dir():
        config = folder / "config.json"
        return json.loads(config.read_text()) if config.is_file() else None
    try:
        from huggingface_hub import hf_hub_download

        return json.loads(Path(hf_hub_download(path_or_id, "config.json", revision=revision)).read_text())
    except Exception as exc:  # offline, gated, or a typo: the engine will say which when it loads
        log.warning("could not read config.json of %s (%s); skipping the checks that need it", path_or_id, exc)
        return None


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
    target = read_model_config(model.path, model.revision)
    draft = read_model_config(spec.model, spec.revision)
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
    draft = read_model_config(spec.model, spec.revision)
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
    target = read_model_config(model.path, model.revision)
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


# The checks a method's registry entry (specbatch.config.METHODS) names in its ``preflight``.
HOOKS: dict[str, Callable[[JobConfig], None]] = {
    "suffix_package": check_suffix_package,
    "draft_source": check_draft_source,
    "draft_vocabulary": check_draft_vocabulary,
    "parallel_drafting_token": check_parallel_drafting_token,
    "mtp_layers": check_mtp_layers,
}


def preflight(job: JobConfig) -> None:
    """Every check that can run before the engine: those the job's method names, in its order; raises ConfigError."""
    for hook in METHODS[job.spec.method].preflight:
        HOOKS[hook](job)
