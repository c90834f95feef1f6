"""The one error every config check raises, so callers catch config mistakes apart from everything else."""

from __future__ import annotations


class ConfigError(ValueError):
    """A config value that cannot work; the message names the key and the fix."""


def require(ok: bool, message: str) -> None:
    """Raise ConfigError(message) unless ``ok``: the checks read as a list of conditions, each with its fix."""
    if not ok:
        raise ConfigError(message)
