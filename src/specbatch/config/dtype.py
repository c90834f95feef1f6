"""``model.dtype``: what ``auto`` becomes on this machine, and what an explicit dtype costs on it.

``auto`` is resolved when the config is built, before anything else reads it, so the run folder's digest, run.json,
MLflow and every command printed from the config carry the dtype that ran, never ``auto``: runs in two dtypes never
share a folder or a comparison row, and ``auto`` on a machine with native bf16 finds the folders of earlier
``model.dtype=bfloat16`` runs again.

- On a CPU: bfloat16 where the CPU has native bf16 (AVX-512 BF16 or AMX, as PyTorch and oneDNN see it:
  :mod:`specbatch.common.machine`), float32 otherwise, since bfloat16 there is emulated (measured 3.5x slower
  than float32 on an AVX2-only AMD EPYC, issue 25). float32 is also the dtype where greedy speculation is
  token-identical to no speculation.
- On a GPU: what vLLM's own ``auto`` picks (vllm/config/model.py ``_resolve_auto_dtype``): the checkpoint's dtype
  from its config.json, except that float32 checkpoints, and dtypes the GPU lacks, get the GPU's preferred dtype
  (bfloat16 from compute capability 8.0, float16 before).
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass

from specbatch.assets.checkpoints import read_model_config
from specbatch.common.machine import Machine, this_machine

log = logging.getLogger(__name__)

# bfloat16 over float32 throughput on a CPU that emulates bf16: SmolLM2-135M default job, AVX2-only AMD EPYC,
# 10.0 against 35.3 output tok/s back to back (docs/cpu.md, issue 25).
EMULATED_BF16_SLOWDOWN = 3.5


class Dtype(enum.StrEnum):
    auto = "auto"
    bfloat16 = "bfloat16"
    float16 = "float16"
    float32 = "float32"


@dataclass(frozen=True)
class DtypeChoice:
    """The dtype a job runs in, and what to tell the user about it (``note`` at info level, ``warning`` louder)."""

    dtype: Dtype
    note: str | None = None
    warning: str | None = None


def _no_bf16(machine: Machine) -> str:
    if machine.isa_cap:
        return f"{machine.isa_cap} keeps PyTorch/oneDNN off their bf16 instructions"
    flags = " ".join(machine.cpu_flags) or "no AVX2"
    return f"this CPU ({machine.cpu_model}: {flags}) has no AVX-512 BF16 or AMX"


def choose_cpu_dtype(requested: Dtype, machine: Machine) -> DtypeChoice:
    """``auto`` on a CPU, and the warning an explicit bfloat16 gets where it is emulated."""
    if requested is Dtype.auto:
        if machine.native_bf16:
            native = " and ".join(f for f in ("avx512_bf16", "amx_bf16") if f in machine.cpu_flags)
            return DtypeChoice(Dtype.bfloat16, f"model.dtype auto → bfloat16: this CPU has native bf16 ({native})")
        return DtypeChoice(
            Dtype.float32, f"model.dtype auto → float32: {_no_bf16(machine)}, so bfloat16 would be emulated"
        )
    if requested is Dtype.bfloat16 and not machine.native_bf16:
        return DtypeChoice(
            requested,
            warning=(
                f"model.dtype=bfloat16: {_no_bf16(machine)}, so every bfloat16 matrix product is emulated; expect "
                f"about {EMULATED_BF16_SLOWDOWN:g}x lower throughput than float32 (model.dtype=auto picks float32 "
                "on this CPU)"
            ),
        )
    return DtypeChoice(requested)


def checkpoint_dtype(path: str, revision: str | None = None) -> str | None:
    """The dtype a checkpoint's config.json declares (``dtype``, or transformers 4's ``torch_dtype``); None when its
    config.json cannot be read here (a hub id offline)."""
    config = read_model_config("model.path", path, revision)
    if config is None:  # unreadable: the GPU's preferred dtype is chosen, and the note says why
        return None
    text_config = config.get("text_config") or {}
    declared = config.get("dtype") or config.get("torch_dtype") or text_config.get("dtype")
    return str(declared).removeprefix("torch.") if declared else None


def choose_gpu_dtype(declared: str | None, compute_capability: str | None, gpu: str) -> DtypeChoice:
    """vLLM's ``auto`` on a CUDA GPU, for a checkpoint that declares ``declared`` (None: unknown)."""
    try:
        bf16 = float(compute_capability or "0") >= 8.0
    except ValueError:
        bf16 = False
    supported = [Dtype.bfloat16, Dtype.float16, Dtype.float32] if bf16 else [Dtype.float16, Dtype.float32]
    preferred = supported[0]
    if declared is None:
        why = "its config.json could not be read here, so the GPU's preferred dtype"
        dtype = preferred
    elif declared == "float32":
        why, dtype = "a float32 checkpoint runs in the GPU's preferred dtype", preferred
    elif declared in supported:
        why, dtype = f"the checkpoint's own dtype ({declared})", Dtype(declared)
    else:
        why, dtype = f"this GPU lacks the checkpoint's {declared}, so its preferred dtype", preferred
    return DtypeChoice(dtype, f"model.dtype auto → {dtype.value}: vLLM's auto on {gpu}: {why}")


def choose_dtype(requested: Dtype, path: str, revision: str | None, machine: Machine | None = None) -> DtypeChoice:
    """The dtype ``requested`` runs in on ``machine`` (default: this one)."""
    machine = machine or this_machine()
    if machine.gpu_count:
        if requested is not Dtype.auto:
            return DtypeChoice(requested)
        return choose_gpu_dtype(checkpoint_dtype(path, revision), machine.gpu_compute_capability, machine.gpu_name)
    return choose_cpu_dtype(requested, machine)


def log_dtype_choice(choice: DtypeChoice) -> None:
    """The one line a job prints about its dtype: why ``auto`` chose it, or what an explicit one costs here."""
    if choice.warning:
        log.warning(choice.warning)
    elif choice.note:
        log.info(choice.note)
