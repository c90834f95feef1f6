"""The GPU install resolves as a whole, checked without a GPU: pip's dry run of the project's `gpu` and `test` extras
against PyPI, as a GPU machine's fresh set-up would install them (needs the package registry, as set-up does)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import PROJECT_ROOT

# The project itself, and hydra-core's grammar runtime (pure Python, no wheel on PyPI; the CPU set-up builds it too).
PURE_PYTHON_SDISTS = {"specbatch", "antlr4-python3-runtime"}


def test_the_gpu_extra_resolves_from_pypi_without_conflict(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    # PyPI alone, as a GPU machine sees it: this machine's pip configuration adds local indexes of CPU builds.
    env = {key: value for key, value in os.environ.items() if not key.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    result = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet"]
        + ["--disable-pip-version-check", "--index-url", "https://pypi.org/simple", "--report", str(report)]
        + [f"{PROJECT_ROOT}[gpu,test]"],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert result.returncode == 0, f"the gpu extra does not resolve:\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
    installed = {item["metadata"]["name"].lower(): item for item in json.loads(report.read_text())["install"]}
    versions = {name: item["metadata"]["version"] for name, item in installed.items()}
    assert versions["vllm"] == "0.32.0"
    assert versions["torch"] == "2.13.0", "the CUDA build of torch vLLM pins, not a CPU one"
    assert any(name.startswith("nvidia-") for name in versions), "CUDA runtime packages come with it"
    # Everything resolved from wheels but pure-Python sdists that build anywhere: no compiled sdist whose build
    # could fail on a GPU machine (arctic-inference is built by jobs/setup.sh instead).
    sdists = sorted(
        name
        for name, item in installed.items()
        if name not in PURE_PYTHON_SDISTS and not item["download_info"]["url"].endswith(".whl")
    )
    assert not sdists, f"built from sources at install time: {sdists}"
    # The job's own pins hold in the GPU resolution too.
    for pin in ("mlflow==3.17.2", "transformers==5.19.0", "hydra-core==1.3.8", "pyarrow==25.0.1", "openai==3.54.0"):
        name, version = pin.split("==")
        assert versions[name] == version, pin
