"""The resolved config as plain data: for run records, MLflow, Parquet metadata and the identities' digests."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from omegaconf import OmegaConf

from specbatch.common.masking import mask_data
from specbatch.config.schema import JobConfig


def to_plain_dict(job: JobConfig) -> dict[str, Any]:
    """The resolved config as plain JSON-able data (enums as their values)."""

    def plain(value: Any) -> Any:
        if isinstance(value, enum.Enum):
            return value.value
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, list):
            return [plain(v) for v in value]
        return value

    return plain(dataclasses.asdict(job))


def public_config(job: JobConfig) -> dict[str, Any]:
    """The plain config as it may be written anywhere: passwords in URIs and credential values masked."""
    return mask_data(to_plain_dict(job))


def to_yaml(config: dict[str, Any]) -> str:
    """A plain config (from ``public_config``, so already masked) as YAML."""
    return OmegaConf.to_yaml(OmegaConf.create(config))
