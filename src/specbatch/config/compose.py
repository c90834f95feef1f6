"""From Hydra's composed config to a checked :class:`JobConfig`: schema registration and the key check.

Hydra composes the YAML presets against the schemas registered here; :func:`to_job_config` then refuses keys the
schema lacks (Hydra accepts ``+key``, and building the dataclasses would drop it silently), resolves the values and
builds the dataclasses, whose ``__post_init__`` checks run. Every refusal is a ConfigError naming the key and fix.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import typing
from collections.abc import Sequence
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

from specbatch.assets.cache import register_resolvers as register_asset_resolvers
from specbatch.common.environment import PROJECT_ROOT
from specbatch.common.errors import ConfigError
from specbatch.config.schema import GROUPS, JobConfig


def register_configs() -> None:
    """Register the schemas (so YAML files can say ``defaults: [base_<group>]``) and the resolvers the presets use."""
    # The assets own theirs (${specbatch_cache:}, ${package_file:pkg,rel}): where they are built and shipped.
    register_asset_resolvers()
    cs = ConfigStore.instance()
    cs.store(name="base_config", node=JobConfig)
    for group, node in GROUPS.items():
        cs.store(group=group, name=f"base_{group}", node=node)


def compose_job(overrides: Sequence[str] = ()) -> JobConfig:
    """The job config composed from the project's conf/ with these overrides and checked, as jobs/generate.py would
    compose it (for code that runs a job, or reads one's settings, outside Hydra's own entry point)."""
    from hydra import compose, initialize_config_dir  # noqa: PLC0415 (Hydra's composition API, only needed here)

    register_configs()
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        return to_job_config(compose(config_name="config", overrides=list(overrides)))


def known_key(key: str) -> bool:
    """Whether the schema has ``key``: one of schema_keys, or a key inside an open mapping (dict) of it."""
    keys = schema_keys()
    parts = key.split(".")
    return key in keys or any(keys.get(".".join(parts[:i])) is dict for i in range(1, len(parts)))


@functools.cache
def schema_keys() -> dict[str, type | None]:
    """Every key of the job config as a dotted name → its dataclass for sections (``spec``), ``dict`` for open
    mappings (``spec.auto.checkpoints``), None for values."""

    def walk(cls: type, prefix: str) -> dict[str, type | None]:
        out: dict[str, type | None] = {}
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            key, hint = prefix + f.name, hints[f.name]
            # An optional section (spec.auto: AutoConfig | None) is a section too.
            options = [hint, *typing.get_args(hint)]
            section = next((h for h in options if isinstance(h, type) and dataclasses.is_dataclass(h)), None)
            if section is None and typing.get_origin(hint) is dict:
                section = dict  # an open mapping (spec.auto.checkpoints): any key below it is the user's
            out[key] = section
            if section is not None and section is not dict:
                out.update(walk(section, key + "."))
        return out

    return walk(JobConfig, "")


def unknown_key_message(key: str) -> str:
    """The refusal of a key the schema does not have, naming the closest real one and its section's keys."""
    keys = schema_keys()
    leaf = key.rsplit(".", 1)[-1]

    def likeness(candidate: str) -> float:
        # A typo in the last part (spec.prompt_lookup_mni) or a missing section (prompt_lookup_min) both match.
        whole = difflib.SequenceMatcher(None, key, candidate).ratio()
        return max(whole, difflib.SequenceMatcher(None, leaf, candidate.rsplit(".", 1)[-1]).ratio())

    closest = max((k for k in keys if keys[k] is None), key=likeness)
    if likeness(closest) >= 0.6:
        hint = f"did you mean {closest}?"
    else:
        hint = f"no key is like it (the closest is {closest})."
    section = ""
    parts = key.split(".")
    for n in range(len(parts) - 1, 0, -1):
        if keys.get(".".join(parts[:n])) is not None:
            section = ".".join(parts[:n])
            break
    siblings = [k.rsplit(".", 1)[-1] for k in keys if k.rpartition(".")[0] == section]
    where = section or "the top level"
    return (
        f"unknown key {key}: {hint} {where} has only {', '.join(siblings)} "
        "(a leading + adds no key either; python jobs/generate.py --cfg job prints the whole config)"
    )


def check_known_keys(cfg: DictConfig) -> None:
    """Refuse keys the schema does not know (``+x=1``, ``++spec.typo=2``): building the dataclasses would drop them."""
    plain = OmegaConf.to_container(cfg, resolve=False)
    known = schema_keys()

    def walk(node: dict[Any, Any], prefix: str) -> None:
        for name, value in node.items():
            key = f"{prefix}{name}"
            if not prefix and name == "hydra":
                continue  # present only when composed with return_hydra_config; Hydra checks its own keys
            if key not in known:
                raise ConfigError(unknown_key_message(key))
            if known[key] not in (None, dict) and isinstance(value, dict):
                walk(value, key + ".")

    assert isinstance(plain, dict)
    walk(plain, "")


def to_job_config(cfg: DictConfig) -> JobConfig:
    """Resolve and validate a composed config; raises ConfigError naming the key and the fix."""
    check_known_keys(cfg)
    try:
        job = OmegaConf.to_object(cfg)
    except ConfigError:
        raise
    except MissingMandatoryValue as exc:
        key = exc.full_key or "a value"
        raise ConfigError(f"{key} is required by this preset: pass it on the command line, e.g. {key}=...") from None
    except OmegaConfBaseException as exc:
        # __post_init__ errors arrive wrapped; keep our own message, it already names key and fix.
        cause = exc.__cause__ or exc.__context__
        if isinstance(cause, ConfigError):
            raise ConfigError(str(cause)) from None
        raise ConfigError(f"invalid config: {exc}") from exc
    if not isinstance(job, JobConfig):
        raise ConfigError("the config does not start from base_config: add `- base_config` to its defaults list")
    return job
