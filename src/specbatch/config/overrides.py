"""Command-line overrides checked against the job's schema before Hydra composes anything.

Hydra answers ``bogus_key=1`` with "use +bogus_key=1", and a ``+`` key is then accepted and silently dropped when
the dataclasses are built. This check refuses every key the schema lacks, ``+`` or not, naming the closest real
key, before Hydra's own message (and before a sweep launches a single job).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from hydra._internal.utils import get_args_parser
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException

from specbatch.config import ConfigError, schema_keys, unknown_key_message


def config_groups(*conf_dirs: Path) -> set[str]:
    """The config groups of these config folders: their sub-folders (``spec``, ``model_spec``, ...)."""
    return {p.name for d in conf_dirs if d.is_dir() for p in d.iterdir() if p.is_dir()}


def unknown_override_keys(argv: list[str], conf_dir: Path) -> list[str]:
    """Keys of the overrides in ``argv`` (a jobs/generate.py command line) that the job config does not have.

    Group selections (``spec=ngram``, ``hydra/launcher=slurm``) and Hydra's own ``hydra.*`` keys are Hydra's to
    check. A command line Hydra itself cannot parse is left to Hydra, which reports it better.
    """
    parser = get_args_parser()
    parser.exit_on_error = False
    try:
        args, _ = parser.parse_known_args(argv)
        overrides = OverridesParser.create().parse_overrides(args.overrides)
    except (argparse.ArgumentError, HydraException):
        return []
    if args.help or args.hydra_help:
        return []
    extra = [Path(args.config_dir)] if args.config_dir else []
    groups = config_groups(conf_dir, *extra)
    known = schema_keys()
    unknown = []
    for override in overrides:
        key = override.key_or_group
        # hydra.* keys, group paths (hydra/launcher) and group selections, also with a package (spec@x=ngram).
        if key.split(".")[0] == "hydra" or "/" in key or key in groups or override.package is not None:
            continue
        if key not in known:
            unknown.append(key)
    return unknown


def check_overrides(argv: list[str], conf_dir: Path) -> None:
    """Raise ConfigError naming the first override key the schema lacks and the closest real key."""
    unknown = unknown_override_keys(argv, conf_dir)
    if unknown:
        raise ConfigError(unknown_key_message(unknown[0]))
