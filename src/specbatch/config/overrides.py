"""Hydra overrides, read in one place and always with Hydra's own parser: checked against the job's schema before
Hydra composes anything, taken apart for the records (a sweep's swept values, a job's key=value pairs, an override
dropped from a command), and written for a command line that Hydra reads back as the value it was given.

Hydra answers ``bogus_key=1`` with "use +bogus_key=1", and a ``+`` key is then accepted and silently dropped when
the dataclasses are built. This check refuses every key the schema lacks, ``+`` or not, naming the closest real
key, before Hydra's own message (and before a sweep launches a single job).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra._internal.utils import get_args_parser
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import HydraException

from specbatch.config import ConfigError, unknown_key_message
from specbatch.config.compose import known_key
from specbatch.config.schema import check_output_root


def config_groups(*conf_dirs: Path) -> set[str]:
    """The config groups of these config folders: their sub-folders (``spec``, ``model_spec``, ...)."""
    return {p.name for d in conf_dirs if d.is_dir() for p in d.iterdir() if p.is_dir()}


def _command_line(argv: list[str]) -> tuple[argparse.Namespace, list[Override]] | None:
    """Hydra's reading of a jobs/generate.py command line: its options and overrides; None when Hydra cannot parse
    it (left to Hydra, which reports it better) or it asks for help."""
    parser = get_args_parser()
    parser.exit_on_error = False
    try:
        args, _ = parser.parse_known_args(argv)
        overrides = OverridesParser.create().parse_overrides(args.overrides)
    except (argparse.ArgumentError, HydraException):
        return None
    return None if args.help or args.hydra_help else (args, overrides)


def unknown_override_keys(argv: list[str], conf_dir: Path) -> list[str]:
    """Keys of the overrides in ``argv`` (a jobs/generate.py command line) that the job config does not have.

    Group selections (``spec=ngram``, ``hydra/launcher=slurm``) and Hydra's own ``hydra.*`` keys are Hydra's to
    check. A command line Hydra itself cannot parse is left to Hydra, which reports it better.
    """
    parsed = _command_line(argv)
    if parsed is None:
        return []
    args, overrides = parsed
    extra = [Path(args.config_dir)] if args.config_dir else []
    groups = config_groups(conf_dir, *extra)
    unknown = []
    for override in overrides:
        key = override.key_or_group
        # hydra.* keys, group paths (hydra/launcher) and group selections, also with a package (spec@x=ngram).
        if key.split(".")[0] == "hydra" or "/" in key or key in groups or override.package is not None:
            continue
        if not known_key(key):
            unknown.append(key)
    return unknown


def check_overrides(argv: list[str], conf_dir: Path) -> None:
    """Raise ConfigError naming the first override key the schema lacks and the closest real key, or an output_root
    the job cannot write under: Hydra makes its own folder there (``${output_root}/_hydra/...``) before the job
    checks its config, so an empty one would put it at the root of the file system."""
    unknown = unknown_override_keys(argv, conf_dir)
    if unknown:
        raise ConfigError(unknown_key_message(unknown[0]))
    parsed = _command_line(argv)
    overrides = parsed[1] if parsed else []
    launcher = [o for o in overrides if o.key_or_group == "launcher" and not o.is_delete()]
    ray_keys = [o.key_or_group for o in overrides if o.key_or_group.split(".")[0] == "ray"]
    if ray_keys and not launcher:
        # Without it the section is null (the job runs in this process) and Hydra's answer is an assertion.
        raise ConfigError(f"{ray_keys[0]} is set but the job runs in this process: add launcher=ray to run it on Ray")
    for override in overrides:
        value = override.value()
        # One value as written; a sweep's, or one Hydra interpolates, is checked by each job's config.
        plain = value is None or (isinstance(value, str) and "${" not in value)
        if override.key_or_group == "output_root" and not override.is_sweep_override() and plain:
            check_output_root(value)


def parse_overrides(overrides: Sequence[str]) -> list[Override]:
    """Hydra's reading of these overrides (quotes, brackets, sweeps and functions as Hydra sees them).

    Raises:
        ConfigError: an override Hydra cannot read, with Hydra's reason.
    """
    try:
        return OverridesParser.create().parse_overrides(list(overrides))
    except HydraException as exc:
        raise ConfigError(f"cannot read the overrides {' '.join(overrides)!r}: {exc}") from None


def override_key(override: Override) -> str:
    """The key as written without Hydra's +/++/~ prefix (``tracking.tags.x``, ``spec@draft``)."""
    return override.key_or_group + (f"@{override.package}" if override.package else "")


def override_text(override: Override) -> str | None:
    """The value exactly as written on the command line (Hydra's quotes kept); None for a bare deletion (``~key``)."""
    line = override.input_line or ""
    _, sep, value = line.partition("=")
    return value if sep else None


def swept_overrides(overrides: Sequence[str]) -> list[str]:
    """``key=values`` of the overrides a multirun sweeps (a list of values, or range/choice/glob/...), prefix
    dropped; a list value (``[[1,4,3]]``) or a quoted comma is one value, not a sweep."""
    return [f"{override_key(o)}={override_text(o)}" for o in parse_overrides(overrides) if o.is_sweep_override()]


def override_values(overrides: Sequence[str]) -> dict[str, str]:
    """``["spec=ngram", "+x=1", "~y"]`` → ``{"spec": "ngram", "x": "1", "y": "(deleted)"}``: one job's overrides."""
    out = {}
    for override in parse_overrides(overrides):
        text = override_text(override)
        out[override_key(override)] = "(deleted)" if override.is_delete() and text is None else (text or "")
    return out


def without_keys(overrides: Sequence[str], *keys: str) -> list[str]:
    """The overrides (as written) other than those setting, adding or deleting one of ``keys``."""
    return [text for text, o in zip(overrides, parse_overrides(overrides), strict=True) if override_key(o) not in keys]


def hydra_override(key: str, value: Any) -> str:
    """``key=value`` as Hydra reads it back to ``value``: as written when Hydra's parser gives the value back (a
    path with a space does), else the value as Hydra's double-quoted string (a comma, a quote, ``=``, a string of
    digits, leading spaces). Quote it for the shell on top (shlex.quote)."""
    text = str(value)
    if isinstance(value, bool):
        text = text.lower()
    if _reads_back(key, text, value):
        return f"{key}={text}"
    quoted = _hydra_quoted(str(value))
    if not _reads_back(key, quoted, str(value)):
        raise ConfigError(f"{key}={value!r} cannot be written as a Hydra override that reads back the same value")
    return f"{key}={quoted}"


def _reads_back(key: str, text: str, value: Any) -> bool:
    try:
        parsed = OverridesParser.create().parse_override(f"{key}={text}")
    except HydraException:
        return False
    return not parsed.is_sweep_override() and parsed.value() == value


def _hydra_quoted(text: str) -> str:
    """Hydra's double-quoted string of ``text``: its quotes escaped, and the backslashes before one (or before the
    closing quote) doubled, the only places Hydra reads a backslash as an escape."""
    return '"' + re.sub(r'(\\*)("|$)', lambda m: m[1] * 2 + ("\\" + m[2] if m[2] else ""), text) + '"'
