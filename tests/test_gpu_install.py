"""The GPU install resolves as a whole, checked without a GPU: uv's resolution of the project's `gpu` and `test`
extras against PyPI alone, wheels only, as a GPU machine's fresh set-up would install them (needs the package
registry, as set-up does). uv resolves from the wheels' metadata in seconds; pip's dry run took 2.5 minutes of the
suite on 2 cores."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import PROJECT_ROOT

# hydra-core's grammar runtime: pure Python with no wheel on PyPI, built anywhere (the CPU set-up builds it too).
PURE_PYTHON_SDISTS = ["antlr4-python3-runtime"]


def test_the_gpu_extra_resolves_from_pypi_without_conflict(tmp_path: Path) -> None:
    pinned = tmp_path / "gpu.txt"
    # PyPI alone, as a GPU machine sees it: this machine's pip and uv configuration add local indexes of CPU builds.
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PIP_", "UV_"))}
    result = subprocess.run(
        [str(Path(sys.executable).parent / "uv"), "pip", "compile", "pyproject.toml", "--no-config", "--quiet"]
        + ["--extra", "gpu", "--extra", "test", "--index-url", "https://pypi.org/simple", "--python", sys.executable]
        # Wheels only, but for pure-Python sdists that build anywhere: no compiled sdist whose build could fail on a
        # GPU machine (arctic-inference is built by jobs/setup.sh instead).
        + ["--only-binary", ":all:", *(f"--no-binary={name}" for name in PURE_PYTHON_SDISTS), "-o", str(pinned)],
        capture_output=True,
        text=True,
        env=env,
        cwd=PROJECT_ROOT,
        timeout=900,
    )
    assert result.returncode == 0, f"the gpu extra does not resolve from wheels:\n{result.stderr[-3000:]}"
    versions = dict(re.findall(r"^([a-z0-9._-]+)==(\S+)", pinned.read_text(), flags=re.MULTILINE))
    assert versions["vllm"] == "0.32.0"
    assert versions["torch"] == "2.13.0", "the CUDA build of torch vLLM pins, not a CPU one"
    assert any(name.startswith("nvidia-") for name in versions), "CUDA runtime packages come with it"
    # The job's own pins hold in the GPU resolution too.
    for pin in ("mlflow==3.17.2", "transformers==5.19.0", "hydra-core==1.3.8", "pyarrow==25.0.1", "openai==3.54.0"):
        name, version = pin.split("==")
        assert versions[name] == version, pin
