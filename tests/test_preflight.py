"""Checks that read installed packages and checkpoint configs, before any engine: one test per promised message."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from specbatch import preflight as preflight_module
from specbatch.config import ConfigError
from specbatch.preflight import mtp_layer_count, preflight, read_model_config


def fake_checkpoint(folder: Path, **config) -> str:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


def test_suffix_without_arctic_inference_says_how_to_install(job_factory, monkeypatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        preflight_module.importlib.util, "find_spec", lambda name: None if name == "arctic_inference" else real(name)
    )
    with pytest.raises(ConfigError) as err:
        preflight(job_factory("spec=suffix"))
    assert "spec=suffix needs the arctic-inference package" in str(err.value)
    assert "make setup" in str(err.value) and "pip install arctic-inference==0.1.1" in str(err.value)


def test_suffix_with_arctic_inference_passes(job_factory) -> None:
    preflight(job_factory("spec=suffix"))


@pytest.mark.parametrize("method", ["draft_model", "eagle", "eagle3"])
def test_draft_with_another_vocabulary_is_refused(job_factory, tmp_path: Path, method: str) -> None:
    target = fake_checkpoint(tmp_path / "target", vocab_size=49152)
    draft = fake_checkpoint(tmp_path / "draft", vocab_size=32000)
    job = job_factory(f"model.path={target}", "model.embedded=null", f"spec={method}", f"spec.model={draft}")
    with pytest.raises(ConfigError) as err:
        preflight(job)
    assert f"spec.model={draft} has vocab_size=32000 but model.path={target} has vocab_size=49152" in str(err.value)
    assert "must share the target's tokenizer" in str(err.value)


def test_matching_vocabulary_passes_including_multimodal_text_config(job_factory, tmp_path: Path) -> None:
    target = fake_checkpoint(tmp_path / "target", text_config={"vocab_size": 1000})
    draft = fake_checkpoint(tmp_path / "draft", vocab_size=1000)
    preflight(job_factory(f"model.path={target}", "model.embedded=null", "spec=draft_model", f"spec.model={draft}"))


def test_mtp_on_a_target_without_mtp_layers(job_factory) -> None:
    # The embedded SmolLM2 is a plain Llama.
    with pytest.raises(ConfigError) as err:
        preflight(job_factory("spec=mtp"))
    assert "spec=mtp needs a target with built-in MTP layers" in str(err.value)
    assert "model=tiny_mimo" in str(err.value) and "spec=ngram" in str(err.value)


def test_mtp_k_must_fit_the_layer_count(job_factory, tmp_path: Path) -> None:
    target = fake_checkpoint(tmp_path / "mimo", num_nextn_predict_layers=2, vocab_size=10)
    base = [f"model.path={target}", "model.embedded=null", "spec=mtp"]
    preflight(job_factory(*base, "spec.num_speculative_tokens=1"))
    preflight(job_factory(*base, "spec.num_speculative_tokens=4"))
    with pytest.raises(ConfigError, match="spec.num_speculative_tokens=3 does not fit a target with 2 MTP layer"):
        preflight(job_factory(*base, "spec.num_speculative_tokens=3"))


def test_unreadable_hub_config_skips_with_a_warning(monkeypatch, caplog) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert read_model_config("nobody/no-such-model-xyz") is None
    assert "skipping the checks that need it" in caplog.text


def test_mtp_layer_keys() -> None:
    assert mtp_layer_count({"num_nextn_predict_layers": 1}) == 1
    assert mtp_layer_count({"text_config": {"mtp_num_hidden_layers": 2}}) == 2
    assert mtp_layer_count({"vocab_size": 5}) == 0
