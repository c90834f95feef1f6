"""The asset cache owns the locations and the resolvers: the config reads them without importing any builder."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from specbatch.assets.cache import TINY_MEMBERS, EmbeddedAssetError, embedded_locations, register_resolvers
from specbatch.assets.prepare import ensure_embedded


def test_config_imports_no_asset_builder() -> None:
    code = "import sys, specbatch.config\nprint(sorted(m for m in sys.modules if m.startswith('specbatch.assets.')))\n"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # The checkpoint reader (config.json, hub look-up) moved here from specbatch.config: it builds nothing.
    assert result.stdout.strip() == "['specbatch.assets.cache', 'specbatch.assets.checkpoints']"


def test_resolvers_point_into_the_cache(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SPECBATCH_CACHE", str(tmp_path))
    register_resolvers()
    cfg = OmegaConf.create({"where": "${specbatch_cache:}/tiny/target"})
    assert cfg.where == f"{tmp_path}/tiny/target"
    assert embedded_locations("smollm2") == [tmp_path / "models" / "SmolLM2-135M-Instruct"]
    assert embedded_locations("tiny") == [tmp_path / "tiny" / member for member in TINY_MEMBERS]


def test_an_unknown_kind_names_the_known_ones() -> None:
    for call in (lambda: embedded_locations("huge"), lambda: ensure_embedded("huge", "/x")):
        with pytest.raises(EmbeddedAssetError, match="model.embedded='huge' is unknown: use smollm2 or tiny"):
            call()


def test_the_embedded_kinds_are_the_configs_choices() -> None:
    # assets/ sits below config/ and cannot import its enum: the two lists are kept equal here.
    from specbatch.assets.cache import EMBEDDED_KINDS
    from specbatch.config.schema import EmbeddedModel

    assert list(EMBEDDED_KINDS) == [kind.value for kind in EmbeddedModel]
