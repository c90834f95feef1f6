"""Shared test helpers: compose the real conf/ the way jobs/generate.py does, then shrink it for tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from mlflow_server import MlflowServer, start_mlflow_server
from specbatch.config import JobConfig, register_configs, to_job_config

PROJECT_ROOT = Path(__file__).resolve().parents[1]
CONF_DIR = PROJECT_ROOT / "conf"
GENERATE = PROJECT_ROOT / "jobs" / "generate.py"

register_configs()


def compose_config(overrides: list[str] | None = None) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=overrides or [])


def compose_job(overrides: list[str] | None = None) -> JobConfig:
    return to_job_config(compose_config(overrides))


def run_generate(
    args: list[str], timeout: float = 900, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run jobs/generate.py as users do, in a child process (vLLM needs its own __main__ for spawn)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, str(GENERATE), *args],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def job_factory(tmp_path: Path) -> Callable[..., JobConfig]:
    """Compose the real config with overrides, writing into this test's tmp folder."""

    def make(*overrides: str) -> JobConfig:
        return compose_job([f"output_root={tmp_path / 'outputs'}", *overrides])

    return make


@pytest.fixture
def mlflow_server(tmp_path: Path) -> Iterator[MlflowServer]:
    """A real ``mlflow server`` on 127.0.0.1 (sqlite store, artifacts over HTTP) in this test's tmp folder.

    Yields an object with ``.uri`` (pass it as ``tracking.uri=...``), ``.process``, ``.stop()`` and ``.kill()``.
    Function-scoped so a test may kill it; for one server per module, use ``start_mlflow_server`` in a
    module-scoped fixture (see tests/mlflow_server.py).
    """
    with start_mlflow_server(tmp_path / "mlflow-server") as server:
        yield server
