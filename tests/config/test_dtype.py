"""model.dtype=auto: resolved per machine when the config is built, so the run records (and is found by) the dtype
that ran; an explicit bfloat16 on a CPU that emulates it runs with a warning."""

from __future__ import annotations

import json
import logging

import pytest

from conftest import fake_engine
from specbatch.common.machine import Machine, this_machine
from specbatch.config import run_folder_digest, to_plain_dict, workload_digest
from specbatch.config.dtype import Dtype, choose_cpu_dtype, choose_dtype, choose_gpu_dtype
from specbatch.pipeline import run_job
from specbatch.run.folder import RunFolder

AVX2 = Machine("AMD EPYC", ("avx2",), 2)
AVX512_NO_BF16 = Machine("Intel Xeon Skylake", ("avx2", "avx512f"), 2)
AVX512_BF16 = Machine("AMD EPYC 9R14", ("avx2", "avx512f", "avx512_bf16"), 2)
AMX = Machine("Intel Xeon 8480+", ("avx2", "avx512f", "amx_tile", "amx_bf16"), 2)
CAPPED = Machine("AMD EPYC 9R14", ("avx2", "avx512f", "avx512_bf16"), 2, isa_cap="ONEDNN_MAX_CPU_ISA=AVX2")


@pytest.mark.parametrize(
    ("machine", "dtype"),
    [
        (AVX2, "float32"),
        (AVX512_NO_BF16, "float32"),
        (CAPPED, "float32"),
        (AVX512_BF16, "bfloat16"),
        (AMX, "bfloat16"),
    ],
)
def test_auto_on_a_cpu_is_bfloat16_only_with_native_bf16(machine: Machine, dtype: str) -> None:
    choice = choose_cpu_dtype(Dtype.auto, machine)
    assert choice.dtype.value == dtype and choice.warning is None
    assert choice.note.startswith(f"model.dtype auto → {dtype}: ")
    if dtype == "float32":
        assert "bfloat16 would be emulated" in choice.note
    if machine is AVX2:
        assert choice.note == (
            "model.dtype auto → float32: this CPU (AMD EPYC: avx2) has no AVX-512 BF16 or AMX, so bfloat16 would be "
            "emulated"
        )


def test_explicit_bfloat16_where_it_is_emulated_runs_with_a_warning_naming_the_slowdown() -> None:
    slow = choose_cpu_dtype(Dtype.bfloat16, AVX2)
    assert slow.dtype is Dtype.bfloat16 and slow.note is None
    assert "emulated" in slow.warning and "3.5x lower throughput than float32" in slow.warning
    assert "model.dtype=auto picks float32" in slow.warning
    assert choose_cpu_dtype(Dtype.bfloat16, AMX).warning is None
    assert choose_cpu_dtype(Dtype.float32, AVX2) == choose_cpu_dtype(Dtype.float32, AMX)


@pytest.mark.parametrize(
    ("declared", "capability", "dtype"),
    [
        ("bfloat16", "9.0", "bfloat16"),
        ("float16", "9.0", "float16"),
        ("float32", "9.0", "bfloat16"),  # vLLM downcasts float32 checkpoints to the GPU's preferred dtype
        (None, "8.0", "bfloat16"),
        ("bfloat16", "7.5", "float16"),  # no bf16 before Ampere
        ("float32", "7.5", "float16"),
    ],
)
def test_auto_on_a_gpu_is_what_vllm_auto_picks(declared: str | None, capability: str, dtype: str) -> None:
    choice = choose_gpu_dtype(declared, capability, "NVIDIA A100")
    assert choice.dtype.value == dtype and choice.note.startswith(f"model.dtype auto → {dtype}: vLLM's auto on")


def test_a_gpu_machine_reads_the_checkpoints_own_dtype(tmp_path) -> None:
    (tmp_path / "config.json").write_text('{"torch_dtype": "float16", "model_type": "llama"}')
    h100 = Machine("AMD EPYC 9654", ("avx2", "avx512f", "avx512_bf16"), 32, "NVIDIA H100", 8, "9.0")
    assert choose_dtype(Dtype.auto, str(tmp_path), None, h100).dtype is Dtype.float16
    assert choose_dtype(Dtype.float32, str(tmp_path), None, h100).dtype is Dtype.float32


def test_the_real_machine_resolves_auto_and_the_config_never_says_auto(job_factory) -> None:
    job = job_factory()
    expected = "bfloat16" if this_machine().native_bf16 else "float32"
    assert job.model.dtype.value == expected
    assert to_plain_dict(job)["model"]["dtype"] == expected
    assert job_factory("model.dtype=float16").model.dtype is Dtype.float16


def use_machine(monkeypatch, machine: Machine) -> None:
    monkeypatch.setattr("specbatch.config.dtype.this_machine", lambda: machine)


def test_auto_finds_the_folders_of_earlier_bfloat16_runs_and_never_mixes_dtypes(
    local_job_factory, monkeypatch, caplog
) -> None:
    # A run written when the default was model.dtype=bfloat16 (run.json and folder say bfloat16).
    old = local_job_factory("model.dtype=bfloat16", "tracking=off", rows=4)
    old_root = run_job(old, engine=fake_engine(old)).folder.root

    use_machine(monkeypatch, AVX512_BF16)
    auto_here = local_job_factory("model.dtype=auto", "tracking=off", rows=4)
    assert auto_here.model.dtype is Dtype.bfloat16
    assert run_folder_digest(auto_here) == run_folder_digest(old)
    with caplog.at_level(logging.INFO, logger="specbatch"):
        again = run_job(auto_here, engine=fake_engine(auto_here))
    assert again.folder.root == old_root and not again.generated
    assert "model.dtype auto → bfloat16: this CPU has native bf16 (avx512_bf16)" in caplog.text

    use_machine(monkeypatch, AVX2)
    auto_avx2 = local_job_factory("model.dtype=auto", "tracking=off", rows=4)
    assert auto_avx2.model.dtype is Dtype.float32
    assert RunFolder.for_job(auto_avx2).root != old_root
    assert workload_digest(to_plain_dict(auto_avx2)) != workload_digest(to_plain_dict(old))


def test_every_run_records_its_machine_in_run_json_the_summary_and_the_launch(local_job_factory) -> None:
    job = local_job_factory("tracking=off", rows=2)
    result = run_job(job, engine=fake_engine(job))
    machine = this_machine()
    assert result.summary.machine == machine.to_dict()
    assert result.folder.read_summary().machine == machine.to_dict()
    record = result.folder.read_run_record()
    assert record["created_with"]["machine"] == machine.line()
    assert record["created_with"]["cpu_flags"] == " ".join(machine.cpu_flags)
    assert record["config"]["model"]["dtype"] == job.model.dtype.value
    [launch] = result.folder.stats_dir.glob("launch-*.json")
    assert json.loads(launch.read_text())["machine"] == machine.line()
