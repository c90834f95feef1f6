"""The first thing to run on a GPU machine (``make gpu-check``, jobs/gpu_check.py): every GPU preset on a handful of
prompts, greedy, each in its own process, and one table: loaded or the error, tok/s, AL, rows identical to its
``spec=none`` and peak GPU memory.

Nobody on the project's CPU machines can run the GPU presets, so this is where they are first proven. Before
anything runs it checks what they need: a CUDA GPU (``nvidia-smi``), a driver for CUDA 13 (vLLM 0.32's wheels use
torch's cu13 packages) and the Hugging Face hub (the checkpoints, Llama's gated). ``--force-cpu`` runs CPU
stand-ins of the same cases (the embedded SmolLM2 and the tiny random family) to show the table's shape.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from specbatch.common.environment import PROJECT_ROOT

GENERATE = PROJECT_ROOT / "jobs" / "generate.py"
# How much of a failed preset's error its row keeps.
ERROR_CHARS = 400
# vLLM 0.32.0's CUDA wheels pull torch 2.13's cu13 packages.
MIN_CUDA = (13, 0)
# Hub checkpoints of the GPU presets (conf/model/*.yaml, conf/model_spec/*.yaml).
HUB_CHECKPOINTS = (
    "meta-llama/Llama-3.1-8B-Instruct",
    "amd/PARD-Llama-3.2-1B",
    "yuhuili/EAGLE-LLaMA3.1-Instruct-8B",
    "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
    "XiaomiMiMo/MiMo-7B-Base",
    "Qwen/Qwen3-8B",
    "z-lab/Qwen3-8B-DFlash-b16",
    "Qwen/Qwen3-4B-FP8",
    "deepseek-ai/dspark_qwen3_4b_block7",
)


@dataclass(frozen=True)
class Case:
    """One row of the table: a preset, and the label of the ``spec=none`` run it is compared with."""

    label: str
    overrides: tuple[str, ...]
    baseline: str | None = None


LLAMA, MIMO = "model=llama31_8b_instruct", "model=mimo_7b_base"
# The block drafters' targets, as vLLM's own DFlash and DSpark tests pair them.
QWEN3_8B, QWEN3_4B = "model=qwen3_8b", "model=qwen3_4b_fp8"
GPU_CASES = (
    Case("llama none", (LLAMA, "spec=none")),
    Case("llama ngram k3", (LLAMA, "spec=ngram"), "llama none"),
    Case("llama suffix", (LLAMA, "spec=suffix"), "llama none"),
    Case(
        "llama draft_model PARD k3, one token per pass",
        (LLAMA, "spec=draft_model", "spec.parallel_drafting=null", "spec.num_speculative_tokens=3"),
        "llama none",
    ),
    Case("llama draft_model PARD k12, parallel drafting", (LLAMA, "spec=draft_model"), "llama none"),
    Case("llama eagle k3", (LLAMA, "spec=eagle"), "llama none"),
    Case("llama eagle3 k3", (LLAMA, "spec=eagle3"), "llama none"),
    # vLLM's block verification (Sun et al.) runs on its newer model runner only, on a GPU: lossless, so greedy it
    # must match its none; its AL and tok/s beside the row above are block against standard verification.
    Case(
        "llama eagle3 k3, block verification",
        (LLAMA, "spec=eagle3", "spec.rejection_sample_method=block"),
        "llama none",
    ),
    Case("mimo none", (MIMO, "spec=none")),
    Case("mimo mtp k1", (MIMO, "spec=mtp"), "mimo none"),
    Case("qwen3-8b none", (QWEN3_8B, "spec=none")),
    Case("qwen3-8b dflash k16", (QWEN3_8B, "spec=dflash"), "qwen3-8b none"),
    Case("qwen3-4b-fp8 none", (QWEN3_4B, "spec=none")),
    Case("qwen3-4b-fp8 dspark k7", (QWEN3_4B, "spec=dspark"), "qwen3-4b-fp8 none"),
)
GPU_COMMON = ("engine=gpu",)

# CPU stand-ins, case for case: real methods on the embedded SmolLM2, checkpoint methods on the tiny random family
# (whose draft was not trained for parallel drafting: that row shows how a refused preset looks).
SMOL, TINY, TINY_MIMO = "model=smollm2_135m", "model=tiny_llama", "model=tiny_mimo"
CPU_CASES = (
    Case("smollm2 none", (SMOL, "spec=none")),
    Case("smollm2 ngram k3", (SMOL, "spec=ngram"), "smollm2 none"),
    Case("smollm2 suffix", (SMOL, "spec=suffix"), "smollm2 none"),
    Case("tiny none", (TINY, "spec=none", "dataset=humaneval")),
    Case("tiny draft_model k3", (TINY, "spec=draft_model", "dataset=humaneval"), "tiny none"),
    Case(
        "tiny draft_model k12, parallel drafting",
        (
            TINY,
            "spec=draft_model",
            "spec.parallel_drafting=true",
            "spec.num_speculative_tokens=12",
            "dataset=humaneval",
        ),
        "tiny none",
    ),
    Case("tiny eagle k3", (TINY, "spec=eagle", "dataset=humaneval"), "tiny none"),
    Case("tiny eagle3 k3", (TINY, "spec=eagle3", "dataset=humaneval"), "tiny none"),
    # Refused before loading on a machine without a GPU (docs/methods.md, "Verification and drafting modes").
    Case(
        "tiny eagle3 k3, block verification",
        (TINY, "spec=eagle3", "spec.rejection_sample_method=block", "dataset=humaneval"),
        "tiny none",
    ),
    Case("tiny-mimo none", (TINY_MIMO, "spec=none", "dataset=humaneval")),
    Case("tiny-mimo mtp k1", (TINY_MIMO, "spec=mtp", "dataset=humaneval"), "tiny-mimo none"),
    Case("tiny dflash k3", (TINY, "spec=dflash", "dataset=humaneval"), "tiny none"),
    # No DSpark stand-in exists and vLLM's CPU build cannot run DSpark (docs/methods.md, "Block drafters"): the job
    # refuses it before loading, whatever the draft (the tiny DFlash one here), and the row shows that refusal.
    Case(
        "tiny dspark k3",
        (TINY, "spec=dspark", "spec.model=${specbatch_cache:}/tiny/dflash", "spec.num_speculative_tokens=3")
        + ("dataset=humaneval",),
        "tiny none",
    ),
)
CPU_COMMON = ("engine=cpu", "model.dtype=float32")


class CheckRefused(RuntimeError):
    """This machine cannot run the GPU check; the message says why and what to do."""


@dataclass
class Outcome:
    """What one case did: its figures, or the error that stopped it."""

    case: Case
    error: str | None = None
    tokens_per_second: float | None = None
    acceptance_length: float | None = None
    # Token ids by (row id, turn, sample), as compare keys them.
    completions: dict[tuple[str, int, int], list[int]] | None = None
    peak_gpu_mib: float | None = None


def cuda_version(smi_output: str) -> tuple[int, int] | None:
    """The highest CUDA version the driver supports, from ``nvidia-smi``'s header ("CUDA Version: 13.0")."""
    found = re.search(r"CUDA Version:\s*(\d+)\.(\d+)", smi_output)
    return (int(found.group(1)), int(found.group(2))) if found else None


def check_gpu() -> str:
    """The GPUs nvidia-smi lists; CheckRefused on a machine without a CUDA GPU or with a driver older than CUDA 13."""
    smi = shutil.which("nvidia-smi")
    listed = subprocess.run([smi, "-L"], capture_output=True, text=True, check=False) if smi else None
    if listed is None or listed.returncode != 0 or "GPU" not in listed.stdout:
        raise CheckRefused(
            "no CUDA GPU here (nvidia-smi finds none): make gpu-check runs the GPU presets, on a machine with an "
            "NVIDIA GPU and its driver. To see the table's shape on this machine: make gpu-check ARGS=--force-cpu"
        )
    header = subprocess.run([smi], capture_output=True, text=True, check=False).stdout
    version = cuda_version(header)
    if version is not None and version < MIN_CUDA:
        raise CheckRefused(
            f"the NVIDIA driver supports CUDA {version[0]}.{version[1]}, but vLLM 0.32.0's wheels run on torch's "
            f"CUDA {MIN_CUDA[0]} packages: update the driver to one for CUDA {MIN_CUDA[0]}"
        )
    return listed.stdout.strip()


def check_hub(checkpoints: tuple[str, ...] = HUB_CHECKPOINTS) -> None:
    """Every checkpoint's config.json is reachable (or cached); CheckRefused naming what is missing and why."""
    from huggingface_hub import hf_hub_download  # noqa: PLC0415 (only the GPU check needs it)

    missing = []
    for repo in checkpoints:
        try:
            hf_hub_download(repo, "config.json")
        except Exception as exc:  # offline, gated without a token, or gone: all mean "cannot run here"
            missing.append(f"{repo} ({type(exc).__name__})")
    if missing:
        raise CheckRefused(
            "the GPU presets load their checkpoints from the Hugging Face hub, and these cannot be read: "
            f"{', '.join(missing)}. Give the machine hub access (HF_HUB_OFFLINE unset), and for the gated Llama "
            "accept its licence on the hub and export HF_TOKEN"
        )


def _gpu_memory_mib() -> float | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    query = ["--query-gpu=memory.used", "--format=csv,noheader,nounits"]
    out = subprocess.run([smi, *query], capture_output=True, text=True, check=False).stdout
    values = [float(v) for v in out.split() if v.replace(".", "", 1).isdigit()]
    return sum(values) if values else None


def run_case(case: Case, common: tuple[str, ...], workdir: Path, max_samples: int) -> Outcome:
    """The case's job in its own process (a preset that fails to load ends only its own row), with the peak GPU
    memory used meanwhile (over what was in use before it)."""
    out = workdir / case.label.replace(" ", "_").replace(",", "")
    args = [*case.overrides, *common, "sampling=greedy", f"max_samples={max_samples}"]
    args += [f"output_root={out}", "tracking=off"]
    before = _gpu_memory_mib()
    peak: list[float] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.5):
            used = _gpu_memory_mib()
            if used is not None:
                peak.append(used)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        job = subprocess.run([sys.executable, str(GENERATE), *args], capture_output=True, text=True, check=False)
    finally:
        done.set()
        sampler.join()
    peak_gpu = max(peak) - (before or 0.0) if peak else None
    if job.returncode != 0:
        return Outcome(case, error=_last_error(job.stdout + job.stderr), peak_gpu_mib=peak_gpu)
    # Read as compare reads a finished run (the refusals above need none of it).
    from specbatch.analysis.run_data import load_run  # noqa: PLC0415

    run = load_run(next(p.parent for p in (out / "runs").rglob("run.json")))
    return Outcome(
        case,
        tokens_per_second=run.summary.output_tokens_per_second,
        acceptance_length=run.summary.mean_acceptance_length,
        completions=run.tokens,
        peak_gpu_mib=peak_gpu,
    )


def _last_error(output: str) -> str:
    """The line that says why a job failed: its last ERROR line, else its last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if "ERROR" in line or "Error" in line]
    line = (errors or lines or ["exited without output"])[-1].split("] - ", 1)[-1]
    return line if len(line) <= ERROR_CHARS else line[: ERROR_CHARS - 1] + "…"


def identical_rows(outcome: Outcome, reference: Outcome | None) -> str:
    """``identical/compared`` rows of ``outcome`` against ``reference``'s (on the rows both have), or ``-`` when
    either has no completions."""
    if outcome.completions is None or reference is None or reference.completions is None:
        return "-"
    common = [r for r in reference.completions if r in outcome.completions]
    return f"{sum(outcome.completions[r] == reference.completions[r] for r in common)}/{len(common)}"


def table(outcomes: list[Outcome]) -> str:
    """One Markdown table, a row per case."""
    by_label = {o.case.label: o for o in outcomes}
    lines = [
        "| preset | loaded | output tok/s | AL | identical to its none | peak GPU memory (MiB) |",
        "|---|---|---|---|---|---|",
    ]
    for outcome in outcomes:
        base = by_label.get(outcome.case.baseline or "")
        same = identical_rows(outcome, base)
        loaded = "yes" if outcome.error is None else f"no: {outcome.error}"
        rate = "-" if outcome.tokens_per_second is None else f"{outcome.tokens_per_second:.1f}"
        al = "-" if outcome.acceptance_length is None else f"{outcome.acceptance_length:.2f}"
        memory = "-" if outcome.peak_gpu_mib is None else f"{outcome.peak_gpu_mib:,.0f}"
        lines.append(f"| {outcome.case.label} | {loaded} | {rate} | {al} | {same} | {memory} |")
    return "\n".join(lines)


def gpu_check(*, force_cpu: bool, max_samples: int, workdir: Path) -> str:
    """Check the machine, run every case one after another, return the table. Raises CheckRefused."""
    if force_cpu:
        cases, common = CPU_CASES, CPU_COMMON
    else:
        print(f"GPUs: {check_gpu()}", flush=True)
        if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
            raise CheckRefused("HF_HUB_OFFLINE is set: the GPU presets load their checkpoints from the hub; unset it")
        check_hub()
        cases, common = GPU_CASES, GPU_COMMON
    outcomes = []
    for case in cases:
        began = time.monotonic()
        outcomes.append(run_case(case, common, workdir, max_samples))
        state = "loaded" if outcomes[-1].error is None else f"failed: {outcomes[-1].error}"
        print(f"{case.label}: {state} ({time.monotonic() - began:.0f} s)", flush=True)
    return table(outcomes)
