"""Checks that read installed packages and checkpoint configs, before any engine: one test per promised message."""

from __future__ import annotations

import importlib.util
import json
import socket
import time
from pathlib import Path

import pytest

from conftest import run_generate
from specbatch.assets import checkpoints
from specbatch.assets.checkpoints import check_model_source, read_model_config
from specbatch.backends.vllm import methods as vllm_methods
from specbatch.config import ConfigError
from specbatch.config.preflight import preflight
from specbatch.data.prompts import load_tokenizer
from specbatch.methods.mtp import mtp_layer_count
from specbatch.pipeline import run_job


def fake_checkpoint(folder: Path, **config) -> str:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


def test_suffix_without_arctic_inference_says_how_to_install(job_factory, monkeypatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        vllm_methods.importlib.util, "find_spec", lambda name: None if name == "arctic_inference" else real(name)
    )
    # The package is vLLM's need (its suffix proposer imports it): vLLM's table of methods checks it.
    with pytest.raises(ConfigError) as err:
        vllm_methods.check_method(job_factory("spec=suffix"))
    assert "spec=suffix needs the arctic-inference package" in str(err.value)
    assert "run `make setup`, which builds arctic-inference 0.1.1 once per machine on CPUs and GPUs" in str(err.value)


def test_suffix_with_arctic_inference_passes(job_factory) -> None:
    vllm_methods.check_method(job_factory("spec=suffix"))
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


def test_a_head_in_speculators_format_is_checked_by_its_transformer_layer_config(job_factory, tmp_path: Path) -> None:
    """speculators (and jobs/train_drafter.py) keep the head's vocabulary in transformer_layer_config, where vLLM reads
    it: a head for the target passes, one of another vocabulary is refused as any draft is."""
    target = fake_checkpoint(tmp_path / "target", vocab_size=49152)
    for name, vocab in (("ours", 49152), ("other", 32000)):
        fake_checkpoint(
            tmp_path / name,
            speculators_model_type="eagle3",
            speculators_config={"algorithm": "eagle3"},
            transformer_layer_config={"model_type": "llama", "vocab_size": vocab},
        )
    common = [f"model.path={target}", "model.embedded=null", "spec=eagle3"]
    preflight(job_factory(*common, f"spec.model={tmp_path / 'ours'}"))
    with pytest.raises(ConfigError, match="has vocab_size=32000 but model.path=.* has vocab_size=49152"):
        preflight(job_factory(*common, f"spec.model={tmp_path / 'other'}"))


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
    from huggingface_hub import constants

    # huggingface_hub reads HF_HUB_OFFLINE once, at import; an earlier test imported it, so the setting is patched
    # where the download reads it (the environment alone let it try the network here until its timeout: 23 s).
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert read_model_config("spec.model", "nobody/no-such-model-xyz") is None
    assert "skipping the checks that need it" in caplog.text


def test_mtp_layer_keys() -> None:
    assert mtp_layer_count({"num_nextn_predict_layers": 1}) == 1
    assert mtp_layer_count({"text_config": {"mtp_num_hidden_layers": 2}}) == 2
    assert mtp_layer_count({"vocab_size": 5}) == 0


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("/nonexistent/ckpt", "model.path=/nonexistent/ckpt: no such folder, and not a hub id (org/name) either"),
        ("not//a//repo", "model.path=not//a//repo: no such folder, and not a hub id (org/name) either"),
        ("nobody/no-such-model-xyz", "model.path=nobody/no-such-model-xyz is not a local folder, and as a hub id it"),
    ],
)
def test_a_model_path_that_cannot_be_loaded_names_the_key_before_any_engine(tmp_path: Path, path: str, says: str):
    began = time.monotonic()
    offline = {"HF_HUB_OFFLINE": "1"}
    args = [f"output_root={tmp_path}", f"model.path={path}", "model.embedded=null", "max_samples=2", "tracking=off"]
    result = run_generate(args, timeout=120, env=offline)
    output = result.stdout + result.stderr
    assert result.returncode == 2, output[-2000:]
    [error] = [line for line in output.splitlines() if "[ERROR]" in line]
    assert says in error
    assert "OS error" not in output and "Traceback" not in output and "starting vLLM" not in output
    assert time.monotonic() - began < 60


def test_model_sources_are_checked_with_the_key_that_names_them(job_factory, tmp_path: Path, monkeypatch) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match=f"model.path={empty} is a folder without config.json"):
        check_model_source("model.path", str(empty))
    check_model_source("model.tokenizer", str(empty), checkpoint=False)  # a tokenizer folder needs no config.json
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    with pytest.raises(
        ConfigError, match="model.tokenizer=nobody/no-tok is not a local folder.*not available offline"
    ):
        check_model_source("model.tokenizer", "nobody/no-tok", checkpoint=False)
    target = fake_checkpoint(tmp_path / "target", vocab_size=10)
    job = job_factory(f"model.path={target}", "model.embedded=null", "spec=draft_model", "spec.model=./no/draft")
    with pytest.raises(ConfigError, match="spec.model=./no/draft: no such folder"):
        preflight(job)
    job = job_factory(f"model.path={target}", "model.embedded=null", "model.tokenizer=/no/such/tokenizer")
    with pytest.raises(ConfigError, match="model.tokenizer=/no/such/tokenizer: no such folder"):
        load_tokenizer(job.model)


@pytest.fixture
def hub_unreachable(monkeypatch: pytest.MonkeyPatch) -> str:
    """huggingface_hub online, its endpoint a closed loopback port: every request to it is refused at once, and
    none leaves this machine. Returns the endpoint."""
    from huggingface_hub import constants

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{probe.getsockname()[1]}"
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    # Both read once, at import, by huggingface_hub.
    monkeypatch.setattr(constants, "ENDPOINT", endpoint)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    return endpoint


def test_a_hub_id_the_hub_cannot_give_is_one_line_within_seconds_before_the_run_folder(
    local_job_factory, tmp_path: Path, hub_unreachable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A draft named by its hub id on a machine without the hub: one look, then one line naming the key and the
    # ways out, before the run folder is written (not minutes of retries, then vLLM's traceback after it).
    job = local_job_factory(
        "engine.backend=dummy", "tracking=off", "spec=draft_model", "spec.model=someorg/some-draft", rows=2
    )
    began = time.monotonic()
    with pytest.raises(ConfigError) as err:
        run_job(job)
    assert time.monotonic() - began < 10
    message = str(err.value)
    assert message.startswith(
        "spec.model=someorg/some-draft is not a local folder, and the hub could not be reached within 5 s"
    )
    assert (
        "download it (hf download someorg/some-draft --local-dir <folder> on a machine with access, and set" in message
    )
    assert "spec.model=<folder>), or set HF_HUB_OFFLINE=1 with it in the Hugging Face cache" in message
    assert "\n" not in message and not (tmp_path / "outputs").exists()
    # The target named by a hub id goes through the same look.
    with pytest.raises(ConfigError, match="^model.path=someorg/some-target is not a local folder, and the hub could"):
        check_model_source("model.path", "someorg/some-target")
    # Offline (either variable, read when the job runs), only the cache is consulted: the hub is not asked at all.
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setattr(checkpoints, "_hub_found", None)
    with pytest.raises(ConfigError, match="spec.model=someorg/some-draft .* not available offline"):
        check_model_source("spec.model", "someorg/some-draft")


def test_medusa_heads_that_do_not_fit_are_refused_before_loading(job_factory, tmp_path: Path) -> None:
    target = fake_checkpoint(tmp_path / "target", vocab_size=1000, hidden_size=64)
    base = [f"model.path={target}", "model.embedded=null", "spec=medusa"]
    # FasterDecoding's older config.json: heads counted by medusa_num_heads, no vocab_size (vLLM takes the target's).
    old = fake_checkpoint(tmp_path / "old", medusa_num_heads=5, medusa_num_layers=1, hidden_size=64)
    preflight(job_factory(*base, f"spec.model={old}", "spec.num_speculative_tokens=5"))
    with pytest.raises(ConfigError, match=r"spec.num_speculative_tokens=6 but .* has 5 Medusa heads .*=5 or less"):
        preflight(job_factory(*base, f"spec.model={old}", "spec.num_speculative_tokens=6"))
    wide = fake_checkpoint(tmp_path / "wide", num_heads=3, hidden_size=128, vocab_size=1000)
    with pytest.raises(ConfigError, match="has hidden_size=128 but model.path=.* has hidden_size=64: the head was"):
        preflight(job_factory(*base, f"spec.model={wide}"))
