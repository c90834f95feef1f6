"""The machine record: flags read the way PyTorch sees them, the ISA caps PyTorch and oneDNN honour, one line."""

from __future__ import annotations

import os

import pytest

from specbatch.common.machine import Machine, isa_cap, machine_line, parse_cpuinfo, this_machine

AVX2_EPYC = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC
flags\t\t: fpu vme de pse tsc msr pae mce avx f16c avx2 fma bmi2
processor\t: 1
model name\t: AMD EPYC
flags\t\t: fpu vme de pse tsc msr pae mce avx f16c avx2 fma bmi2
"""
SAPPHIRE_RAPIDS_FLAGS = "avx2 avx512f avx512bw avx512_bf16 avx512_vnni amx_bf16 amx_tile amx_int8"


def test_cpuinfo_gives_the_model_and_only_the_flags_that_matter() -> None:
    assert parse_cpuinfo(AVX2_EPYC) == ("AMD EPYC", ("avx2",))
    text = f"model name\t: Intel(R) Xeon(R) Platinum 8480+\nflags\t: fpu {SAPPHIRE_RAPIDS_FLAGS}\n"
    model, flags = parse_cpuinfo(text)
    assert model == "Intel(R) Xeon(R) Platinum 8480+"
    assert flags == ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16")


@pytest.mark.parametrize(
    ("environ", "cap"),
    [
        ({}, None),
        ({"ONEDNN_MAX_CPU_ISA": "AVX2"}, "ONEDNN_MAX_CPU_ISA=AVX2"),
        ({"ONEDNN_MAX_CPU_ISA": "avx512_core_vnni"}, "ONEDNN_MAX_CPU_ISA=avx512_core_vnni"),
        ({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}, None),
        ({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_AMX"}, None),
        ({"ATEN_CPU_CAPABILITY": "avx2"}, "ATEN_CPU_CAPABILITY=avx2"),
        ({"ATEN_CPU_CAPABILITY": "avx512"}, None),
    ],
)
def test_onednn_and_aten_caps_keep_bf16_emulated(environ: dict[str, str], cap: str | None) -> None:
    assert isa_cap(environ) == cap


def test_native_bf16_needs_the_instructions_and_no_cap() -> None:
    assert not Machine("AMD EPYC", ("avx2",), 2).native_bf16
    assert not Machine("Intel Skylake", ("avx2", "avx512f"), 2).native_bf16
    assert Machine("AMD EPYC 9004", ("avx2", "avx512f", "avx512_bf16"), 2).native_bf16
    assert Machine("Xeon", ("avx2", "avx512f", "amx_tile", "amx_bf16"), 2).native_bf16
    capped = Machine("Xeon", ("avx2", "avx512f", "avx512_bf16"), 2, isa_cap="ONEDNN_MAX_CPU_ISA=AVX2")
    assert not capped.native_bf16 and "capped: ONEDNN_MAX_CPU_ISA=AVX2" in capped.line()


def test_the_line_and_its_round_trip_through_the_summary_record() -> None:
    gpu = Machine("AMD EPYC 9654", ("avx2", "avx512f", "avx512_bf16"), 32, "NVIDIA H100 80GB HBM3", 8, "9.0")
    assert gpu.line() == "AMD EPYC 9654 · avx2 avx512f avx512_bf16 · 32 cores · 8x NVIDIA H100 80GB HBM3"
    assert machine_line(gpu.to_dict()) == gpu.line()
    assert gpu.tags()["gpu"] == "8x NVIDIA H100 80GB HBM3" and gpu.tags()["cpu_cores"] == "32"
    assert machine_line(None) is None


def test_this_machine_agrees_with_pytorch() -> None:
    """What we read from /proc/cpuinfo is what PyTorch's own cpuinfo (and vLLM's CPU platform) sees."""
    import torch

    machine = this_machine()
    assert machine.cpu_cores == len(os.sched_getaffinity(0))
    assert ("avx2" in machine.cpu_flags) == torch.cpu._is_avx2_supported()
    assert ("avx512f" in machine.cpu_flags) == torch.cpu._is_avx512_supported()
    assert ("avx512_bf16" in machine.cpu_flags) == torch.cpu._is_avx512_bf16_supported()
    assert ("amx_tile" in machine.cpu_flags) == torch.cpu._is_amx_tile_supported()
