"""Runs that group other runs (sweep parent, merged run) when the tracking server is down, and the one-line,
masked errors every MLflow path reports — with a fake engine and nothing listening at the tracking URI."""

from __future__ import annotations

import logging
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import open_dict

from conftest import CONF_DIR, fake_engine
from specbatch.common.atomic_files import atomic_write_json
from specbatch.pipeline import merge_run, run_job
from specbatch.run.multirun import SWEEP_FILE
from specbatch.tracking.store import error_line, unreachable
from specbatch.tracking.sweep import MlflowSweepCallback

PASSWORD = "pw-Secret-789"
# Port 9 (discard): nothing listens, so every call fails at once.
DOWN = f"http://admin:{PASSWORD}@127.0.0.1:9"


def quick_http_failure(monkeypatch) -> None:
    """MLflow's HTTP retry/timeout variables, set here so that what the code sets does not outlive the test."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")


def test_an_error_is_one_masked_line_even_without_a_message() -> None:
    assert error_line(RuntimeError()) == ""
    assert (
        error_line(RuntimeError(f"no answer from {DOWN}\nTraceback ..."))
        == "no answer from http://admin:***@127.0.0.1:9"
    )
    assert error_line(RuntimeError("x" * 400)) == "x" * 300
    assert str(unreachable(ConnectionError())) == "ConnectionError: "


def test_a_sweep_whose_server_went_down_still_ends(tmp_path: Path, caplog, monkeypatch) -> None:
    quick_http_failure(monkeypatch)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"tracking.uri={DOWN}"], return_hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.sweep.dir = str(tmp_path / "sweep")
    # The parent run was created while the server was up.
    atomic_write_json(tmp_path / "sweep" / SWEEP_FILE, {"parent_run_id": "abc", "experiment_id": "1"})
    with caplog.at_level(logging.WARNING):
        MlflowSweepCallback().on_multirun_end(cfg)
    assert "sweep: could not end the MLflow parent run abc" in caplog.text and "admin:***@127.0.0.1:9" in caplog.text
    assert PASSWORD not in caplog.text


def test_a_merge_whose_server_is_down_writes_its_files_and_warns_once(local_job_factory, caplog, monkeypatch) -> None:
    quick_http_failure(monkeypatch)
    # Without a password: merge reads the URI from run.json, where a password is masked.
    job = local_job_factory("tracking.uri=http://127.0.0.1:9", rows=4)
    root = run_job(job, engine=fake_engine(job)).folder.root
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        result = merge_run(root)
    assert result.summary.rows == 4 and result.manifest.exists() and result.summary_path.exists()
    [warning] = [r.getMessage() for r in caplog.records if "MLflow tracking at" in r.getMessage()]
    assert "starting the run" in warning and f"python jobs/merge.py {root}" in warning
