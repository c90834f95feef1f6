"""Where a checkpoint named by the config is, and what its config.json says: the one reader of both, before anything
loads.

A value of ``model.path``, ``model.tokenizer`` or ``spec.model`` is a local folder or a hub id. A hub id is resolved
quickly, so that a machine without the hub hears so in one line, before the run folder is written, instead of after
minutes of retries inside a loader: offline (HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE) only the Hugging Face cache is
consulted; online the hub is asked once, for a few seconds, without a retry loop.

config.json is read here for every check of the methods' checks (specbatch.methods) and for the dtype choice, and its
shape is checked once: a file that is not JSON, not an object, or has a section or value of another kind than
Hugging Face configs have is one ConfigError naming the file and the fix, not a traceback from whichever check read
it first. A checkpoint whose config.json cannot be fetched (a hub id offline and not cached) reads as None: the
checks that need it are skipped with a warning, and the source check says what to do.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from pathlib import Path
from typing import Any

from specbatch.common.errors import ConfigError

log = logging.getLogger(__name__)

# Files whose presence in the Hugging Face cache shows a hub checkpoint (or tokenizer) was downloaded before.
_CACHE_MARKERS = ("config.json", "tokenizer_config.json", "tokenizer.json")
# How long the one look at the hub may take: a reachable hub answers within it, an unreachable one is not retried.
HUB_CHECK_SECONDS = 5.0
# What the checks read from config.json, by kind, wherever they read it (the top level, text_config,
# dflash_config): a value of another kind is a damaged or foreign file, refused here rather than misread there.
_KINDS: dict[str, type] = {
    "text_config": dict,
    "dflash_config": dict,
    "architectures": list,
    "target_layer_ids": list,
    "num_hidden_layers": int,
    "num_nextn_predict_layers": int,
    "mtp_num_hidden_layers": int,
    "n_predict": int,
}
_SECTIONS = ("text_config", "dflash_config")
_JSON_KINDS = {
    dict: "an object",
    list: "a list",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
}


def hub_offline() -> bool:
    """Whether hub ids must come from the Hugging Face cache alone. huggingface_hub reads its variables once, at
    import; they are read again here, so a job's own environment counts whoever imported the library first."""
    from huggingface_hub import constants

    flags = (os.environ.get(name, "").strip().lower() for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))
    return constants.HF_HUB_OFFLINE or any(flag in ("1", "on", "yes", "true") for flag in flags)


def check_model_source(key: str, value: str, revision: str | None = None, *, checkpoint: bool = True) -> None:
    """``value`` (of config ``key``) is a local folder (with config.json for a ``checkpoint``) or a hub id that
    can be loaded here; otherwise a ConfigError that names the key, instead of an OS error from deep in a loader
    (or minutes of retries against a hub this machine cannot reach)."""
    from huggingface_hub import try_to_load_from_cache
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
    download = f"hf download {value} --local-dir <folder> on a machine with access, and set {key}=<folder>"
    if hub_offline():
        if not cached:
            raise ConfigError(
                f"{key}={value} is not a local folder, and as a hub id it is not available offline "
                f"(HF_HUB_OFFLINE=1): it is not in the Hugging Face cache. Download it ({download}), or run with "
                "network access"
            )
        return
    problem = _hub_problem(value, revision, key.rsplit(".", 1)[0] + ".revision")
    if problem is None:
        return
    what, reachable = problem
    if reachable:
        raise ConfigError(f"{key}={value}: {what}")
    way_out = (
        "it is in the Hugging Face cache here: set HF_HUB_OFFLINE=1 to use that copy"
        if cached
        else f"download it ({download}), or set HF_HUB_OFFLINE=1 with it in the Hugging Face cache"
    )
    raise ConfigError(
        f"{key}={value} is not a local folder, and the hub could not be reached within {HUB_CHECK_SECONDS:g} s "
        f"({what}): {way_out}"
    )


@functools.cache
def _hub_found(repo_id: str, revision: str | None) -> None:
    """One look at the hub for ``repo_id`` (remembered once found, so model.path, model.tokenizer and the drafts of
    several candidates cost one); raises what huggingface_hub raised."""
    from huggingface_hub import HfApi, constants

    HfApi(endpoint=constants.ENDPOINT).model_info(repo_id, revision=revision, timeout=HUB_CHECK_SECONDS)


def _hub_problem(repo_id: str, revision: str | None, revision_key: str) -> tuple[str, bool] | None:
    """None when the hub has ``repo_id`` at ``revision`` (of config ``revision_key``); else what is wrong, and
    whether the hub answered."""
    from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError

    try:
        _hub_found(repo_id, revision)
    except RevisionNotFoundError:
        return f"the hub has no revision {revision} of it: set {revision_key} to one it has", True
    except RepositoryNotFoundError:
        return (
            "the hub has no such repository (or it is private and this machine is not logged in: hf auth login, "
            "or HF_TOKEN): check the id",
            True,
        )
    except Exception as exc:  # noqa: BLE001 - no connection, a timeout, a proxy, a server error: unreachable
        return _first_line(exc), False
    return None


def read_model_config(key: str, value: str, revision: str | None = None) -> dict[str, Any] | None:
    """config.json of the checkpoint ``value`` (of config ``key``): a local folder's, or a hub repo's (from the
    cache, or only that file fetched); None when it cannot be fetched here (logged). A file that is there but not a
    Hugging Face config is a ConfigError naming it."""
    folder = Path(value).expanduser()
    if folder.is_dir():
        file = folder / "config.json"
        if not file.is_file():
            return None
        fix = f"restore the checkpoint's own config.json in {folder}, or point {key} at another checkpoint folder"
        return _parsed(key, value, file, fix)
    try:
        from huggingface_hub import hf_hub_download, try_to_load_from_cache

        cached = try_to_load_from_cache(value, "config.json", revision=revision)
        if isinstance(cached, str):
            file = Path(cached)
        elif hub_offline() or _hub_problem(value, revision, "revision") is not None:
            raise LookupError("not in the Hugging Face cache, and the hub cannot give it")
        else:
            file = Path(hf_hub_download(value, "config.json", revision=revision))
    except Exception as exc:  # noqa: BLE001 - offline, gated, or a typo: the source check or the engine says which
        log.warning("could not read config.json of %s=%s (%s); skipping the checks that need it", key, value, exc)
        return None
    fix = f"download it again (hf download {value} config.json --force-download), or point {key} at a local folder"
    return _parsed(key, value, file, fix)


def _parsed(key: str, value: str, file: Path, fix: str) -> dict[str, Any]:
    """The config in ``file``, refused in one line unless it is shaped as Hugging Face configs are."""
    where = f"{key}={value}: its config.json ({file})"
    try:
        config = json.loads(file.read_text())
    except ValueError as exc:  # not JSON, or not UTF-8
        raise ConfigError(f"{where} is not JSON ({_first_line(exc)}): {fix}") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{where} holds {_kind(config)} where an object of settings belongs: {fix}")
    for section, settings in [("", config), *((f"{s}.", config.get(s)) for s in _SECTIONS)]:
        for name, kind in _KINDS.items() if isinstance(settings, dict) else ():
            found = settings.get(name)
            # true/false is a number to Python, never to a Hugging Face config.
            if found is not None and (isinstance(found, bool) or not isinstance(found, kind)):
                raise ConfigError(
                    f"{where} has {section}{name}={json.dumps(found)[:80]}: {_kind(found)} where {_JSON_KINDS[kind]} "
                    f"belongs: {fix}"
                )
    return config


def _kind(value: Any) -> str:
    return _JSON_KINDS.get(type(value), type(value).__name__)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
