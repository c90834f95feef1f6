"""Tiny random-weight checkpoints for trying every speculative method on a laptop or CPU CI, offline.

One call builds a family that shares the embedded SmolLM2 tokenizer (a real tokenizer with a chat template):

    <root>/target/       a 4-layer Llama, the target model
    <root>/draft/        a 2-layer Llama with the same tokenizer       (spec=draft_model)
    <root>/draft_copy/   an exact copy of the target: every draft must be accepted
    <root>/eagle/        an EAGLE head for the target                   (spec=eagle)
    <root>/eagle3/       an EAGLE3 head for the target                  (spec=eagle3)
    <root>/mtp_target/   a Qwen2-shaped MiMo target with one built-in MTP layer  (spec=mtp)
    <root>/dflash/       a DFlash block draft for the target            (spec=dflash)
    <root>/medusa/       three Medusa heads for the target              (spec=medusa)

A member added after a family was built (dflash, medusa) is added to it on the next call, so an existing cache keeps
working.

The weights are random: the models say nothing sensible and the acceptance figures mean nothing. They exist to
exercise the mechanics (engine start-up, lossless greedy verification, metrics) in seconds. Shapes follow what
vLLM 0.32 loads on CPU (docs/methods.md, "Trying every method on a laptop"). Build by hand with
``python -m specbatch.assets.tiny [root]``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from specbatch.assets.cache import (
    READY_MARKER,
    EmbeddedAssetError,
    default_smollm2_dir,
    default_tiny_dir,
    is_ready,
    move_into_place,
    refuse_foreign_folder,
)
from specbatch.assets.cache import TINY_MEMBERS as MEMBERS
from specbatch.assets.embedded import ensure_smollm2

log = logging.getLogger(__name__)

# Target shape: head_dim 32 is one the CPU attention kernels accept; 4 layers so EAGLE3 can tap 3 distinct ones.
HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTERMEDIATE, LAYERS = 128, 4, 2, 32, 256, 4
# EAGLE3 reads hidden states after these target layers; vLLM's default picks repeat a layer on so shallow a
# target and the head then fails with "shape '[-1, ...]' is invalid".
EAGLE3_AUX_LAYERS = [1, 2, 3]
# DFlash reads the hidden states after these target layers (its dflash_config.target_layer_ids; vLLM adds 1, so
# the same taps as EAGLE3's); it was "trained" on blocks of this size, and its slots hold the last token id.
DFLASH_TARGET_LAYERS = [0, 1, 2]
DFLASH_BLOCK = 4
# Medusa heads (one per drafted token, so k=3 at most with this stand-in).
MEDUSA_HEADS = 3
# Peakier random logits: fewer near-ties, so float32 greedy stays identical across batch shapes.
INIT_STD = 0.1


def ensure_tiny_family(root: str | Path, tokenizer_dir: str | Path | None = None, seed: int = 0) -> Path:
    """Build the family once (a few seconds); later calls return at once.

    Built under a temporary name and renamed into place; an existing ``root`` without the ready marker is not
    ours and is refused, never removed.
    """
    root = Path(root).expanduser().resolve()
    if is_ready(root):
        _add_missing_members(root)
        return root
    refuse_foreign_folder(root)
    if tokenizer_dir is None:
        tokenizer_dir = ensure_smollm2(default_smollm2_dir())
    log.info("building tiny random checkpoints for every method into %s", root)
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.tmp-", dir=root.parent))
    try:
        _build(tmp, Path(tokenizer_dir), seed)
        (tmp / READY_MARKER).write_text(json.dumps({"seed": seed, "members": list(MEMBERS)}) + "\n")
        os.chmod(tmp, 0o755)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return move_into_place(tmp, root, is_ready)


def _build(out: Path, tokenizer_dir: Path, seed: int) -> None:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    vocab = len(tokenizer)
    special = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id}
    torch.manual_seed(seed)

    def llama(layers: int, hidden: int, heads: int, kv_heads: int, intermediate: int) -> LlamaConfig:
        return LlamaConfig(
            vocab_size=vocab,
            hidden_size=hidden,
            intermediate_size=intermediate,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            head_dim=hidden // heads,
            max_position_embeddings=4096,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            initializer_range=INIT_STD,
            **special,
        )

    def save_model(model: Any, folder: Path) -> None:
        model.save_pretrained(folder, safe_serialization=True)
        tokenizer.save_pretrained(folder)

    target_config = llama(LAYERS, HIDDEN, HEADS, KV_HEADS, INTERMEDIATE)
    save_model(LlamaForCausalLM(target_config).float(), out / "target")
    save_model(LlamaForCausalLM(llama(2, 64, 2, 1, 128)).float(), out / "draft")
    shutil.copytree(out / "target", out / "draft_copy")

    def normal(*shape: int) -> torch.Tensor:
        return torch.randn(*shape) * INIT_STD

    def ones(n: int) -> torch.Tensor:
        return torch.ones(n)

    def decoder_layer(prefix: str, qkv_in: int, bias: bool = False, input_norm: bool = True) -> dict[str, Any]:
        q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
        weights = {
            f"{prefix}self_attn.q_proj.weight": normal(q, qkv_in),
            f"{prefix}self_attn.k_proj.weight": normal(kv, qkv_in),
            f"{prefix}self_attn.v_proj.weight": normal(kv, qkv_in),
            f"{prefix}self_attn.o_proj.weight": normal(HIDDEN, q),
            f"{prefix}mlp.gate_proj.weight": normal(INTERMEDIATE, HIDDEN),
            f"{prefix}mlp.up_proj.weight": normal(INTERMEDIATE, HIDDEN),
            f"{prefix}mlp.down_proj.weight": normal(HIDDEN, INTERMEDIATE),
            f"{prefix}post_attention_layernorm.weight": ones(HIDDEN),
        }
        if input_norm:
            weights[f"{prefix}input_layernorm.weight"] = ones(HIDDEN)
        if bias:
            weights[f"{prefix}self_attn.q_proj.bias"] = normal(q)
            weights[f"{prefix}self_attn.k_proj.bias"] = normal(kv)
            weights[f"{prefix}self_attn.v_proj.bias"] = normal(kv)
        return weights

    head_config = target_config.to_dict()
    head_config.update(num_hidden_layers=1, torch_dtype="float32")

    # EAGLE (vLLM's EagleLlamaForCausalLM): one decoder layer without input_layernorm, fed by fc([embeds; hidden]).
    # Embeddings and lm_head are shared with the target, so the head stores neither.
    eagle = {**decoder_layer("layers.0.", HIDDEN, input_norm=False), "fc.weight": normal(HIDDEN, 2 * HIDDEN)}
    _save_raw(out / "eagle", eagle, {**head_config, "architectures": ["EagleLlamaForCausalLM"]}, tokenizer)

    # EAGLE3 (LlamaForCausalLMEagle3): q/k/v read [embeds; hidden] (2h), fc fuses three target layers (3h).
    eagle3 = {
        **decoder_layer("midlayer.", 2 * HIDDEN),
        "midlayer.hidden_norm.weight": ones(HIDDEN),
        "fc.weight": normal(HIDDEN, 3 * HIDDEN),
        "norm.weight": ones(HIDDEN),
        "lm_head.weight": normal(vocab, HIDDEN),
    }
    eagle3_config = {
        **head_config,
        "architectures": ["LlamaForCausalLMEagle3"],
        "draft_vocab_size": vocab,
        "eagle_aux_hidden_state_layer_ids": EAGLE3_AUX_LAYERS,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": EAGLE3_AUX_LAYERS, "use_aux_hidden_state": True},
    }
    _save_raw(out / "eagle3", eagle3, eagle3_config, tokenizer)

    # MTP: a Qwen2-shaped MiMo target whose checkpoint carries model.mtp_layers.0.* (vLLM's MiMoMTP layer).
    qwen = Qwen2Config(
        vocab_size=vocab,
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=2,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        max_position_embeddings=4096,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        initializer_range=INIT_STD,
        **special,
    )
    mtp_state = {k: v.contiguous() for k, v in Qwen2ForCausalLM(qwen).float().state_dict().items()}
    prefix = "model.mtp_layers.0."
    mtp_state.update(decoder_layer(prefix, HIDDEN, bias=True))
    mtp_state.update(
        {
            f"{prefix}token_layernorm.weight": ones(HIDDEN),
            f"{prefix}hidden_layernorm.weight": ones(HIDDEN),
            f"{prefix}input_proj.weight": normal(HIDDEN, 2 * HIDDEN),
            f"{prefix}final_layernorm.weight": ones(HIDDEN),
        }
    )
    mtp_config = {
        **qwen.to_dict(),
        "architectures": ["MiMoForCausalLM"],
        "num_nextn_predict_layers": 1,
        "torch_dtype": "float32",
    }
    _save_raw(out / "mtp_target", mtp_state, mtp_config, tokenizer)
    _build_dflash(out / "dflash", out / "target")
    _build_medusa(out / "medusa", out / "target")


def _build_dflash(folder: Path, target_dir: Path) -> None:
    """A DFlash draft (vLLM's DFlashQwen3ForCausalLM): one Qwen3-style layer (q/k norms, non-causal in vLLM since
    the config sets no layer_types), fc fusing the three target layers it reads, hidden_norm and norm. Embeddings
    and lm_head are the target's (vLLM shares them when the checkpoint has none)."""
    import torch
    from transformers import AutoTokenizer

    target = json.loads((target_dir / "config.json").read_text())
    tokenizer = AutoTokenizer.from_pretrained(target_dir)
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM

    def normal(*shape: int) -> torch.Tensor:
        return torch.randn(*shape) * INIT_STD

    prefix = "layers.0."
    state = {
        f"{prefix}self_attn.q_proj.weight": normal(q, HIDDEN),
        f"{prefix}self_attn.k_proj.weight": normal(kv, HIDDEN),
        f"{prefix}self_attn.v_proj.weight": normal(kv, HIDDEN),
        f"{prefix}self_attn.o_proj.weight": normal(HIDDEN, q),
        f"{prefix}self_attn.q_norm.weight": torch.ones(HEAD_DIM),
        f"{prefix}self_attn.k_norm.weight": torch.ones(HEAD_DIM),
        f"{prefix}mlp.gate_proj.weight": normal(INTERMEDIATE, HIDDEN),
        f"{prefix}mlp.up_proj.weight": normal(INTERMEDIATE, HIDDEN),
        f"{prefix}mlp.down_proj.weight": normal(HIDDEN, INTERMEDIATE),
        f"{prefix}input_layernorm.weight": torch.ones(HIDDEN),
        f"{prefix}post_attention_layernorm.weight": torch.ones(HIDDEN),
        "fc.weight": normal(HIDDEN, len(DFLASH_TARGET_LAYERS) * HIDDEN),
        "hidden_norm.weight": torch.ones(HIDDEN),
        "norm.weight": torch.ones(HIDDEN),
    }
    vocab = target["vocab_size"]
    config = {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "vocab_size": vocab,
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": 1,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "max_position_embeddings": target["max_position_embeddings"],
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "block_size": DFLASH_BLOCK,
        "target_hidden_size": HIDDEN,
        "dflash_config": {"mask_token_id": vocab - 1, "target_layer_ids": DFLASH_TARGET_LAYERS},
        "bos_token_id": target.get("bos_token_id"),
        "eos_token_id": target.get("eos_token_id"),
    }
    _save_raw(folder, state, config, tokenizer)


def _build_medusa(folder: Path, target_dir: Path) -> None:
    """Medusa heads (vLLM's Medusa model): per head one residual block (a linear layer, SiLU, added back) on the
    target's last hidden state and an lm_head of its own, as vLLM names them."""
    import torch
    from transformers import AutoTokenizer

    target = json.loads((target_dir / "config.json").read_text())
    vocab = target["vocab_size"]
    state = {}
    for head in range(MEDUSA_HEADS):
        state[f"blocks.{head}.layers.0.weight"] = torch.randn(HIDDEN, HIDDEN) * INIT_STD
        state[f"lm_heads.{head}.weight"] = torch.randn(vocab, HIDDEN) * INIT_STD
    config = {
        "architectures": ["MedusaModel"],
        "model_type": "medusa",
        "hidden_size": HIDDEN,
        "vocab_size": vocab,
        "num_heads": MEDUSA_HEADS,
        "num_hidden_layers": 1,
        "torch_dtype": "float32",
    }
    _save_raw(folder, state, config, AutoTokenizer.from_pretrained(target_dir))


# Members that can be added to a family built before they existed, from its target alone.
_ADDABLE = {"dflash": _build_dflash, "medusa": _build_medusa}


def _add_missing_members(root: Path) -> None:
    """Add members of today's family that an older build of it lacks (built aside, renamed in)."""
    missing = [member for member in _ADDABLE if not (root / member).is_dir()]
    for member in missing:
        log.info("adding the tiny %s checkpoint to %s", member, root)
        tmp = Path(tempfile.mkdtemp(prefix=f".{member}.tmp-", dir=root))
        try:
            _ADDABLE[member](tmp / member, root / "target")
            os.chmod(tmp / member, 0o755)
            try:
                os.rename(tmp / member, root / member)
            except OSError:
                if not (root / member).is_dir():  # not another process that added it meanwhile
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def _save_raw(folder: Path, state: dict[str, Any], config: dict[str, Any], tokenizer: Any) -> None:
    """A checkpoint transformers has no class for: safetensors + config.json + tokenizer."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True)
    save_file({k: v.contiguous() for k, v in state.items()}, str(folder / "model.safetensors"), {"format": "pt"})
    config = {k: v for k, v in config.items() if k not in ("dtype",)}
    (folder / "config.json").write_text(json.dumps(config, indent=2, default=str) + "\n")
    tokenizer.save_pretrained(folder)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build tiny random checkpoints for every speculative method.")
    parser.add_argument("root", nargs="?", default=str(default_tiny_dir()))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        root = ensure_tiny_family(args.root, seed=args.seed)
    except EmbeddedAssetError as exc:
        log.error("%s", exc)
        return 1
    for member in MEMBERS:
        log.info("%-11s %s", member, root / member)
    return 0


if __name__ == "__main__":
    sys.exit(main())
