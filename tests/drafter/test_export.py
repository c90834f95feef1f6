"""What the drafter's export and training refuse, each in one line before any model loads (the dummy backend's runs;
tests/drafter/test_drafter_cpu.py runs the whole hand-off on real vLLM)."""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

import pytest

from conftest import PROJECT_ROOT
from specbatch.config import ConfigError
from specbatch.drafter.export import DONE, EXPORT_RECORD, LAYERS_FILE, check_exportable, export_run, shard_name
from specbatch.drafter.train import read_exports
from specbatch.pipeline import run_job
from specbatch.run.folder import RunFolder
from specbatch.run.status_merge import RunIncompleteError


def _dummy_run(local_job_factory, *extra: str) -> Path:
    job = local_job_factory("engine.backend=dummy", "tracking=off", "sampling.max_tokens=8", *extra, rows=4)
    return run_job(job).folder.root


def _job(script: str, args: list[str], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> list[str]:
    """The job as a user runs it: its exit status must be 2 and it must say one ERROR line; returns the lines."""
    monkeypatch.setattr(sys, "argv", [script, *args])
    caplog.clear()
    assert runpy.run_path(str(PROJECT_ROOT / "jobs" / script))["main"]() == 2
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1, errors
    return errors


def test_an_unfinished_run_is_refused_naming_its_shard(local_job_factory, tmp_path: Path) -> None:
    root = _dummy_run(local_job_factory)
    RunFolder(root, 0, 1).unmark_done()
    with pytest.raises(RunIncompleteError, match="1 of 1 shards are not done"):
        export_run(root, tmp_path / "export")
    assert not (tmp_path / "export").exists()


def test_a_run_whose_tokens_no_model_sampled_is_refused(
    local_job_factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    root = _dummy_run(local_job_factory)
    [error] = _job("export_drafter_data.py", [str(root), str(tmp_path / "export")], monkeypatch, caplog)
    assert "ran engine.backend=dummy: its tokens were made up by the dummy backend" in error
    assert not (tmp_path / "export").exists()


def test_a_greedy_run_with_several_samples_a_prompt_is_refused(local_job_factory, tmp_path: Path) -> None:
    """The job refuses sampling.n>1 at temperature 0 today; a run recorded before that rule (its folder renamed, so
    no digest holds its record) would give the head every completion n times."""
    root = _dummy_run(local_job_factory)
    old = root.with_name("recorded-before-the-rule")
    root.rename(old)
    record = json.loads((old / "run.json").read_text())
    record["config"]["sampling"]["n"] = 3
    (old / "run.json").write_text(json.dumps(record))
    with pytest.raises(ConfigError, match=r"sampling.n=3: its samples of a prompt are the same tokens"):
        check_exportable(old)


def _fake_export(folder: Path, model: str, layers: list[int], done: bool = True) -> Path:
    """An export's record and its one shard's marker, as export_run leaves them (no data: nothing reads it here)."""
    shard = folder / shard_name(0, 1)
    shard.mkdir(parents=True)
    record = {"run": f"/runs/{model}", "model": {"name": model, "path": f"/models/{model}"}, "shards": 1}
    (folder / EXPORT_RECORD).write_text(json.dumps({**record, "aux_layers": None}))
    (shard / LAYERS_FILE).write_text(json.dumps({"layer_ids": layers, "hidden": 576}))
    if done:
        (shard / DONE).write_text("")
    return folder


def test_training_refuses_exports_of_another_model_or_unfinished_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    ours = _fake_export(tmp_path / "ours", "smollm2", [2, 15, 27, 30])
    other = _fake_export(tmp_path / "other", "llama", [2, 16, 29, 32])
    [error] = _job("train_drafter.py", [str(ours), str(other), str(tmp_path / "head")], monkeypatch, caplog)
    assert "the exports come from runs of different models (llama, smollm2)" in error
    half = _fake_export(tmp_path / "half", "smollm2", [2, 15, 27, 30], done=False)
    with pytest.raises(ConfigError, match=r"1 of 1 shards are not exported .* rerun jobs/export_drafter_data.py"):
        read_exports([half])
    with pytest.raises(ConfigError, match="is not an export"):
        read_exports([tmp_path])
    assert not (tmp_path / "head").exists()
