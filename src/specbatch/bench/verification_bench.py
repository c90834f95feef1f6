"""(j) Block against standard verification (issue 54; ``--verification`` runs only this): EAGLE3 k=3 on Llama 3.1 8B
(the GPU presets), ``spec.rejection_sample_method=standard`` and ``block``, greedy, on humaneval_edit and on the
two-turn file (specbatch.bench.full_engine), each run in its own process as ``make gpu-check`` runs its presets: AL,
tok/s, and block's rows identical to standard's (block verification is lossless: greedy, they must be).

vLLM 0.32 verifies blocks only on its newer (V2) model runner, which needs Triton on a GPU: on a machine without one
the job refuses block before loading, so here the report is that refusal (the tiny stand-in's, one process, a few
seconds) and the table waits for a GPU machine.
"""

from __future__ import annotations

import time
from pathlib import Path

from specbatch.bench import machine_header
from specbatch.bench.full_engine import write_two_turn_file
from specbatch.bench.gpu_check import LLAMA, TINY, Case, Outcome, check_gpu, identical_rows, run_case
from specbatch.common.atomic_files import atomic_write_text
from specbatch.common.machine import this_machine

MODES = ("standard", "block")


def workloads(folder: Path, rows: int, two_turn_rows: int) -> dict[str, tuple[tuple[str, ...], int]]:
    """Each workload's data overrides and its rows."""
    two_turn = write_two_turn_file(folder / "humaneval_edit_two_turn.jsonl")
    turns = ("dataset.prompt_format=turns", "dataset.turns_column=turns", "dataset.id_column=id")
    return {
        "humaneval_edit": (("dataset=humaneval_edit",), rows),
        "two-turn": (("dataset=local", f"dataset.path={two_turn}", *turns), two_turn_rows),
    }


def verification_report(rows: int, two_turn_rows: int, root: Path, stamp: str) -> tuple[str, Path]:
    """The table on a GPU machine, the refusal elsewhere; the report and where it was written."""
    folder = root / f"verification-{stamp}"
    folder.mkdir(parents=True)
    lines = [f"# jobs/bench.py --verification, {time.strftime('%Y-%m-%d %H:%M')}", machine_header(), ""]
    if not this_machine().gpu_count:
        refused = run_case(
            Case("tiny eagle3 k3, block", (TINY, "spec=eagle3", "spec.rejection_sample_method=block")),
            ("engine=cpu", "model.dtype=float32"),
            folder,
            1,
        )
        lines += [
            "## (j) block against standard verification: needs a GPU",
            "",
            f"Block verification on this machine: {refused.error or 'ran (unexpected: the job refuses it here)'}",
        ]
    else:
        print(f"GPUs: {check_gpu()}", flush=True)
        lines += table(measure(folder, rows, two_turn_rows))
    path = root / f"verification-{stamp}.md"
    atomic_write_text(path, "\n".join(lines) + "\n")
    return "\n".join(lines), path


def measure(folder: Path, rows: int, two_turn_rows: int) -> dict[str, dict[str, Outcome]]:
    """Each workload's two runs, standard first."""
    out: dict[str, dict[str, Outcome]] = {}
    for name, (data, count) in workloads(folder, rows, two_turn_rows).items():
        out[name] = {}
        for mode in MODES:
            setup = (LLAMA, "spec=eagle3", f"spec.rejection_sample_method={mode}", *data)
            out[name][mode] = run_case(Case(f"{name} {mode}", setup), ("engine=gpu",), folder, count)
    return out


def table(outcomes: dict[str, dict[str, Outcome]]) -> list[str]:
    lines = [
        "## (j) EAGLE3 k=3 on Llama 3.1 8B, greedy: block against standard verification",
        "",
        "| workload | verification | AL | output tok/s | rows identical to standard |",
        "|---|---|---|---|---|",
    ]
    for name, modes in outcomes.items():
        for mode, o in modes.items():
            if o.error is not None:
                lines.append(f"| {name} | {mode} | failed: {o.error} | - | - |")
                continue
            same = "-" if mode == "standard" else identical_rows(o, modes["standard"])
            al = "-" if o.acceptance_length is None else f"{o.acceptance_length:.2f}"
            lines.append(f"| {name} | {mode} | {al} | {o.tokens_per_second:.1f} | {same} |")
    return lines
