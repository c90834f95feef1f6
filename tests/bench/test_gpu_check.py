"""make gpu-check on a machine without what it needs: one clear message and exit code 2, before anything runs; and
the table it prints, from its cases' outcomes. (It runs the GPU presets only on a GPU machine.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import PROJECT_ROOT
from specbatch.bench import gpu_check
from specbatch.bench.gpu_check import CPU_CASES, GPU_CASES, CheckRefused, Outcome, cuda_version, table

GPU_CHECK = PROJECT_ROOT / "jobs" / "gpu_check.py"


def fake_nvidia_smi(folder: Path, cuda: str) -> dict[str, str]:
    """An nvidia-smi that lists one GPU and a driver header for ``cuda`` (the environment to run with it)."""
    folder.mkdir()
    script = folder / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "-L" ]; then echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)"; exit 0; fi\n'
        f'echo "| NVIDIA-SMI 580.00   Driver Version: 580.00   CUDA Version: {cuda} |"\n'
    )
    script.chmod(0o755)
    return {**os.environ, "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}


def run_check(env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(GPU_CHECK)], capture_output=True, text=True, env=env, cwd=PROJECT_ROOT, timeout=120
    )


def test_make_gpu_check_on_this_cpu_machine_says_why_and_exits_2() -> None:
    result = subprocess.run(["make", "gpu-check"], capture_output=True, text=True, cwd=PROJECT_ROOT, timeout=900)
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert "make gpu-check: no CUDA GPU here (nvidia-smi finds none)" in result.stderr
    assert "make gpu-check ARGS=--force-cpu" in result.stderr


def test_a_driver_older_than_cuda_13_is_refused(tmp_path: Path) -> None:
    result = run_check(fake_nvidia_smi(tmp_path / "bin", "12.4"))
    assert result.returncode == 2
    assert "the NVIDIA driver supports CUDA 12.4, but vLLM 0.32.0's wheels run on torch's CUDA 13" in result.stderr


def test_no_hub_access_is_refused_before_any_preset_runs(tmp_path: Path) -> None:
    env = {**fake_nvidia_smi(tmp_path / "bin", "13.0"), "HF_HUB_OFFLINE": "1"}
    result = run_check(env)
    assert result.returncode == 2
    assert "HF_HUB_OFFLINE is set: the GPU presets load their checkpoints from the hub" in result.stderr
    assert "GPUs: GPU 0: NVIDIA H100" in result.stdout


def test_unreadable_checkpoints_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub

    def gated(repo: str, filename: str) -> str:
        raise PermissionError(repo)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", gated)
    with pytest.raises(CheckRefused, match=r"meta-llama/Llama-3.1-8B-Instruct \(PermissionError\).*export HF_TOKEN"):
        gpu_check.check_hub()


def test_cuda_version_from_the_header() -> None:
    assert cuda_version("| NVIDIA-SMI 580.65   Driver Version: 580.65   CUDA Version: 13.0   |") == (13, 0)
    assert cuda_version("no header") is None


def test_every_gpu_preset_has_a_row_and_a_cpu_stand_in() -> None:
    labels = [c.label for c in GPU_CASES]
    for method in ("none", "ngram", "suffix", "parallel drafting", "one token per pass", "eagle k3", "eagle3", "mtp"):
        assert any(method in label for label in labels), method
    assert any("dflash" in label for label in labels) and any("dspark" in label for label in labels)

    def methods(cases: tuple) -> set[str]:
        return {o.split("=", 1)[1] for case in cases for o in case.overrides if o.startswith("spec=")}

    assert methods(CPU_CASES) == methods(GPU_CASES), "every GPU method has a CPU stand-in row"
    # Each GPU preset's checkpoints are checked on the hub before anything runs.
    assert {"z-lab/Qwen3-8B-DFlash-b16", "deepseek-ai/dspark_qwen3_4b_block7"} <= set(gpu_check.HUB_CHECKPOINTS)
    for cases in (GPU_CASES, CPU_CASES):
        names = {c.label for c in cases}
        assert all(c.baseline is None or c.baseline in names for c in cases)


def test_the_table_has_a_row_per_case_with_its_error_or_its_figures() -> None:
    none, ngram, eagle = GPU_CASES[0], GPU_CASES[1], GPU_CASES[5]
    outcomes = [
        Outcome(
            none, tokens_per_second=50.0, completions={("a", 1, 0): [1, 2], ("b", 1, 0): [3]}, peak_gpu_mib=17000.0
        ),
        Outcome(
            ngram, tokens_per_second=80.0, acceptance_length=2.5, completions={("a", 1, 0): [1, 2], ("b", 1, 0): [4]}
        ),
        Outcome(eagle, error="OSError: yuhuili/EAGLE-LLaMA3.1-Instruct-8B is gated"),
    ]
    lines = table(outcomes).splitlines()
    assert lines[0].startswith("| preset | loaded | output tok/s | AL | identical to its none | peak GPU memory")
    assert lines[2] == "| llama none | yes | 50.0 | - | - | 17,000 |"
    assert lines[3] == "| llama ngram k3 | yes | 80.0 | 2.50 | 1/2 | - |"
    assert lines[4] == "| llama eagle k3 | no: OSError: yuhuili/EAGLE-LLaMA3.1-Instruct-8B is gated | - | - | - | - |"


def test_a_failed_preset_keeps_the_line_that_says_why() -> None:
    log = "[2026-11-23 00:38:01,001][specbatch.run.executor][INFO] - loading\n"
    log += "[2026-11-23 00:38:02,002][specbatch][ERROR] - spec.model=x is gated: export HF_TOKEN\n"
    assert gpu_check._last_error(log + "Traceback ...\n") == "spec.model=x is gated: export HF_TOKEN"
    assert gpu_check._last_error("") == "exited without output"
    assert gpu_check._last_error("ERROR " + "y" * 1000).endswith("…")


@pytest.mark.parametrize(
    ("row", "says"),
    [
        ("dspark", "spec=dspark: vLLM 0.32 runs DSpark only on its newer"),
        ("block verification", "spec.rejection_sample_method=block: vLLM 0.32 verifies blocks only on its newer"),
    ],
)
def test_the_cpu_rows_of_what_needs_vllms_newer_runner_show_the_refusal_before_loading(row: str, says: str) -> None:
    from conftest import compose_job
    from specbatch.config import ConfigError
    from specbatch.run.generate import ShardGeneration

    case = next(c for c in CPU_CASES if row in c.label)
    job = compose_job([*case.overrides, *gpu_check.CPU_COMMON])
    # The checks a shard runs before its engine loads: vLLM's rule for the machine before the draft's own checks.
    with pytest.raises(ConfigError, match=says):
        ShardGeneration(job).preflight(job)
    assert any(row in c.label for c in GPU_CASES), "its GPU row"
