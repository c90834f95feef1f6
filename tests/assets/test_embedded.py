"""The embedded model folder is an ordinary, complete HF checkpoint; preparation is idempotent and fails clearly."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from specbatch.assets import embedded
from specbatch.assets.cache import EmbeddedAssetError, package_file
from specbatch.assets.embedded import ensure_smollm2


def test_prepared_folder_is_a_plain_hf_checkpoint(job_factory) -> None:
    folder = Path(job_factory().model.path)
    began = time.perf_counter()
    assert ensure_smollm2(folder) == folder.resolve()
    assert time.perf_counter() - began < 1.0, "an already prepared folder must not be rebuilt"
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["vocab_size"] == 49152
    assert "quantization_config" not in config
    assert (folder / "model.safetensors").stat().st_size > 200e6
    assert (folder / "tokenizer.json").is_file()
    assert "<|im_start|>" in (folder / "chat_template.jinja").read_text()


def test_missing_package_says_how_to_fix() -> None:
    with pytest.raises(EmbeddedAssetError, match="'no_such_pkg_xyz' is not installed.*make setup"):
        package_file("no_such_pkg_xyz", "x.gguf")


def test_failed_preparation_leaves_nothing_that_looks_ready(tmp_path: Path, monkeypatch) -> None:
    def broken(gguf: Path, out: Path, dtype: str) -> None:
        (out / "config.json").write_text("{}")
        raise OSError("disk full")

    monkeypatch.setattr(embedded, "_dequantise", broken)
    target = tmp_path / "models" / "smol"
    with pytest.raises(EmbeddedAssetError, match="could not turn .* into an HF folder.*disk full"):
        ensure_smollm2(target)
    assert not target.exists()
    assert list((tmp_path / "models").iterdir()) == []
