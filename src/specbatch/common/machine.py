"""The machine a run ran on: its CPU model, the instruction-set flags that decide how fast vLLM's CPU build runs,
its cores and its GPUs.

Why it matters: on a CPU without native bfloat16 (no AVX-512 BF16, no AMX) every bfloat16 matrix product is
emulated, measured 3.5x slower than float32 on an AVX2-only AMD EPYC; and throughput ratios taken on two different
CPUs are not comparable (2x apart on two of our own). So ``model.dtype=auto`` reads :func:`this_machine` to choose,
every run records it (run.json, the shard summary, MLflow tags), and compare warns when runs it puts side by side
ran on different machines.

The flags are the kernel's (``/proc/cpuinfo``: CPUID as the OS enables it, which is what PyTorch's cpuinfo and
oneDNN probe too), capped the way PyTorch and oneDNN cap themselves: ``ATEN_CPU_CAPABILITY`` (ATen's kernels) and
``ONEDNN_MAX_CPU_ISA`` (oneDNN's) set to an ISA without bf16 instructions mean bfloat16 is emulated even on a CPU
that has them. GPUs come from ``nvidia-smi`` (no CUDA initialised in this process).
"""

from __future__ import annotations

import functools
import os
import platform
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# The flags recorded for every run, in the kernel's spelling: what vLLM's CPU build dispatches on.
ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16")
# Flags that give native bfloat16 matrix products (oneDNN's avx512_core_bf16 and avx512_core_amx).
BF16_FLAGS = ("avx512_bf16", "amx_bf16")
# oneDNN ISA caps (ONEDNN_MAX_CPU_ISA) below which it has no bf16 instructions, and ATen capabilities without them.
_ONEDNN_WITHOUT_BF16 = {"sse41", "avx", "avx2", "avx2_vnni", "avx2_vnni_2", "avx512_core", "avx512_core_vnni"}
_ATEN_WITHOUT_BF16 = {"default", "avx2"}


@dataclass(frozen=True)
class Machine:
    """What a run ran on. ``cpu_flags`` holds those of :data:`ISA_FLAGS` the CPU has."""

    cpu_model: str
    cpu_flags: tuple[str, ...]
    # CPUs this process may run on (its affinity), the figure that bounds vLLM's threads.
    cpu_cores: int
    gpu_name: str | None = None
    gpu_count: int = 0
    # CUDA compute capability of the first GPU ("9.0"): bfloat16 needs 8.0 or more.
    gpu_compute_capability: str | None = None
    # An environment cap (ATEN_CPU_CAPABILITY / ONEDNN_MAX_CPU_ISA) that keeps bf16 emulated, as "NAME=value".
    isa_cap: str | None = None

    @property
    def native_bf16(self) -> bool:
        """bfloat16 runs on bf16 instructions (AVX-512 BF16 or AMX), not emulated in float32."""
        return self.isa_cap is None and any(flag in self.cpu_flags for flag in BF16_FLAGS)

    def line(self) -> str:
        """One line for logs, reports and tables, e.g. ``AMD EPYC · avx2 · 2 cores``."""
        flags = " ".join(self.cpu_flags) or "no avx2"
        parts = [
            self.cpu_model,
            flags + (f" (capped: {self.isa_cap})" if self.isa_cap else ""),
            f"{self.cpu_cores} cores",
        ]
        if self.gpu_count:
            parts.append(f"{self.gpu_count}x {self.gpu_name}")
        return " · ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for the summary JSON (flags as a list)."""
        out = asdict(self)
        out["cpu_flags"] = list(self.cpu_flags)
        return out

    def tags(self) -> dict[str, str]:
        """Flat strings for run.json's runtime record and MLflow tags."""
        return {
            "machine": self.line(),
            "cpu_model": self.cpu_model,
            "cpu_flags": " ".join(self.cpu_flags),
            "cpu_cores": str(self.cpu_cores),
            "gpu": f"{self.gpu_count}x {self.gpu_name}" if self.gpu_count else "none",
        }


def machine_line(record: dict[str, Any] | None) -> str | None:
    """The line of a recorded machine (a summary's ``machine``), or None when none was recorded."""
    if not record:
        return None
    return Machine(
        cpu_model=str(record.get("cpu_model", "unknown CPU")),
        cpu_flags=tuple(record.get("cpu_flags") or ()),
        cpu_cores=int(record.get("cpu_cores") or 0),
        gpu_name=record.get("gpu_name"),
        gpu_count=int(record.get("gpu_count") or 0),
        gpu_compute_capability=record.get("gpu_compute_capability"),
        isa_cap=record.get("isa_cap"),
    ).line()


def parse_cpuinfo(text: str) -> tuple[str, tuple[str, ...]]:
    """CPU model and the :data:`ISA_FLAGS` present, from the text of ``/proc/cpuinfo`` (its first processor)."""
    model, flags = "", set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and not model:
            model = value.strip()
        elif key == "flags" and not flags:
            flags = set(value.split())
    return model or platform.processor() or platform.machine(), tuple(f for f in ISA_FLAGS if f in flags)


def isa_cap(environ: dict[str, str] | os._Environ[str]) -> str | None:
    """The environment setting that keeps bfloat16 emulated on this process's kernels, if one does."""
    onednn = environ.get("ONEDNN_MAX_CPU_ISA", "").strip().lower()
    if onednn in _ONEDNN_WITHOUT_BF16:
        return f"ONEDNN_MAX_CPU_ISA={environ['ONEDNN_MAX_CPU_ISA']}"
    aten = environ.get("ATEN_CPU_CAPABILITY", "").strip().lower()
    if aten in _ATEN_WITHOUT_BF16:
        return f"ATEN_CPU_CAPABILITY={environ['ATEN_CPU_CAPABILITY']}"
    return None


def _gpus() -> tuple[str | None, int, str | None]:
    """Name of the first GPU, how many there are, and the first one's compute capability."""
    if shutil.which("nvidia-smi") is None:
        return None, 0, None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None, 0, None
    rows = [[cell.strip() for cell in line.rsplit(",", 1)] for line in out.splitlines() if line.strip()]
    if not rows:
        return None, 0, None
    return rows[0][0], len(rows), rows[0][1] if len(rows[0]) > 1 else None


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


@functools.cache
def this_machine() -> Machine:
    """The machine this process runs on (read once per process)."""
    cpuinfo = Path("/proc/cpuinfo")
    text = cpuinfo.read_text(errors="replace") if cpuinfo.is_file() else ""
    model, flags = parse_cpuinfo(text)
    gpu_name, gpu_count, capability = _gpus()
    return Machine(model, flags, _cores(), gpu_name, gpu_count, capability, isa_cap(os.environ))


def minutes_since_boot() -> float | None:
    """How long ago this machine booted, in minutes (``/proc/uptime``); None where the kernel does not say. A bench
    records it beside each job: on these machines the first 40-60 minutes after boot ran slower (engine steps 14 %
    slower on a fresh Intel Xeon with avx512_bf16; the whole test suite 1.5x on a fresh AVX2-only EPYC)."""
    try:
        return float(Path("/proc/uptime").read_text().split()[0]) / 60
    except (OSError, ValueError, IndexError):
        return None
