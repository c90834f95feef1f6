"""Set-up of the embedded models deletes nothing it did not create: a folder the user names is never rebuilt."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import compose_job, run_generate
from specbatch.assets import embedded, tiny
from specbatch.assets.cache import READY_MARKER, EmbeddedAssetError
from specbatch.assets.embedded import ensure_smollm2
from specbatch.assets.prepare import ensure_embedded
from specbatch.assets.tiny import ensure_tiny_family
from specbatch.config import ConfigError


def _user_folder(parent: Path, name: str = "ckpt") -> tuple[Path, Path]:
    """$D/ckpt/NOTES.md plus a sibling file, as in the reproduction of the issue."""
    ckpt = parent / name
    ckpt.mkdir(parents=True)
    (ckpt / "NOTES.md").write_text("notes\n")
    (parent / "sibling.txt").write_text("keep me\n")
    return ckpt, parent


def _assert_untouched(ckpt: Path, parent: Path) -> None:
    assert (ckpt / "NOTES.md").read_text() == "notes\n"
    assert sorted(p.name for p in ckpt.iterdir()) == ["NOTES.md"]
    assert (parent / "sibling.txt").read_text() == "keep me\n"
    assert sorted(p.name for p in parent.iterdir()) == sorted([ckpt.name, "sibling.txt"])


@pytest.mark.parametrize("preset", [None, "tiny_llama", "tiny_mimo"])
def test_cli_model_path_on_an_embedded_preset_is_refused_and_left_alone(tmp_path: Path, preset: str | None) -> None:
    ckpt, parent = _user_folder(tmp_path / "user")
    args = [f"model.path={ckpt}", "max_samples=2", "tracking=off", f"output_root={tmp_path / 'out'}"]
    if preset:
        args.insert(0, f"model={preset}")
    if preset == "tiny_mimo":
        args.append("spec=mtp")
    result = run_generate(args, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == 2, output[-3000:]
    errors = [line for line in output.splitlines() if "ERROR" in line]
    assert len(errors) == 1, output[-3000:]
    assert f"model.path={ckpt}" in errors[0] and "model.embedded=null" in errors[0]
    assert "Traceback" not in output
    # Refused before any engine: vLLM never logged a line, no run folder was made.
    assert "vllm" not in output.lower().replace("vllm's", ""), output[-3000:]
    assert not (tmp_path / "out" / "runs").exists()
    _assert_untouched(ckpt, parent)


def test_a_foreign_folder_at_the_cache_path_stops_the_job_and_stays(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    # E.g. an HF folder the user copied there by hand: it has no ready marker.
    ckpt, parent = _user_folder(cache / "models", "SmolLM2-135M-Instruct")
    args = ["max_samples=2", "tracking=off", f"output_root={tmp_path / 'out'}"]
    result = run_generate(args, timeout=300, env={"SPECBATCH_CACHE": str(cache)})
    output = result.stdout + result.stderr
    assert result.returncode == 2, output[-3000:]
    errors = [line for line in output.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and f"{ckpt} exists but was not prepared by specbatch" in errors[0], output[-3000:]
    assert "Traceback" not in output
    _assert_untouched(ckpt, parent)


def test_cache_location_follows_specbatch_cache(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SPECBATCH_CACHE", str(tmp_path / "cache"))
    # The presets' own paths pass, wherever the cache is.
    assert compose_job([]).model.path == str(tmp_path / "cache" / "models" / "SmolLM2-135M-Instruct")
    assert compose_job(["model=tiny_llama", "model.path=${specbatch_cache:}/tiny/draft_copy"]).model.embedded == "tiny"
    # The default cache path is not this cache's path.
    home = Path.home() / ".cache" / "specbatch" / "models" / "SmolLM2-135M-Instruct"
    with pytest.raises(ConfigError, match=r"model.path=\S+ is not where model.embedded=smollm2 builds its model"):
        compose_job([f"model.path={home}"])
    # An own checkpoint with model.embedded=null is simply a checkpoint.
    job = compose_job([f"model.path={tmp_path / 'mine'}", "model.embedded=null"])
    assert job.model.path == str(tmp_path / "mine") and job.model.embedded is None


def _fake_dequantise(gguf: Path, out: Path, dtype: str) -> None:
    (out / "config.json").write_text("{}")


def _fake_tiny_build(out: Path, tokenizer_dir: Path, seed: int) -> None:
    for member in tiny.MEMBERS:
        (out / member).mkdir()
        (out / member / "config.json").write_text("{}")


def test_ensure_never_removes_a_folder_it_did_not_make(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(embedded, "_dequantise", _fake_dequantise)
    monkeypatch.setattr(tiny, "_build", _fake_tiny_build)
    ckpt, parent = _user_folder(tmp_path / "user")
    with pytest.raises(EmbeddedAssetError, match=f"{ckpt} exists but was not prepared by specbatch"):
        ensure_smollm2(ckpt)
    _assert_untouched(ckpt, parent)
    # model.path names a member of the tiny family: the family's folder is the parent, which is the user's.
    with pytest.raises(EmbeddedAssetError, match=f"{parent} exists but was not prepared by specbatch"):
        ensure_embedded("tiny", ckpt)
    _assert_untouched(ckpt, parent)
    with pytest.raises(EmbeddedAssetError, match="model.embedded=null"):
        ensure_tiny_family(ckpt, tokenizer_dir=tmp_path)
    _assert_untouched(ckpt, parent)
    # An absent (or empty) folder is built as before.
    (tmp_path / "empty").mkdir()
    for target in (tmp_path / "fresh" / "smol", tmp_path / "empty"):
        assert ensure_smollm2(target) == target.resolve()
        assert (target / READY_MARKER).is_file() and (target / "config.json").is_file()
    root = ensure_tiny_family(tmp_path / "family", tokenizer_dir=tmp_path)
    assert (root / READY_MARKER).is_file() and (root / "target" / "config.json").is_file()
    assert not list(tmp_path.rglob(".*.tmp-*")), "temporary build folders were left behind"


def test_a_concurrent_builder_that_finished_first_wins(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "models" / "smol"

    def slower(gguf: Path, out: Path, dtype: str) -> None:
        # While we build, another process finishes the same preparation and renames its folder in.
        target.mkdir(parents=True)
        (target / "config.json").write_text('{"theirs": true}')
        (target / READY_MARKER).write_text("prepared\n")
        _fake_dequantise(gguf, out, dtype)

    monkeypatch.setattr(embedded, "_dequantise", slower)
    assert ensure_smollm2(target) == target.resolve()
    assert (target / "config.json").read_text() == '{"theirs": true}'
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["smol"], "our temporary folder was left"
