"""(k) The same rows locally and on Ray (issue 55; ``--ray`` runs only this).

n-gram k=3 (the default set-up) on ``rows`` prompts of the default data set, greedy, ``max_tokens`` new tokens each:
once as a local launch (the engine in this process's job), once with ``launcher=ray`` on a local Ray the job starts
(one replica reserving every core of the machine, as the local engine has them), alternating, ``repeats`` times each.
Throughput is the run's own figure (output tokens over the generation's seconds, the engine's start-up apart, as the
summary counts it for both); the start-up is listed apart: the engine's (the replica's, for Ray) and the whole job's
wall time, which for Ray holds starting Ray and its actor. Goal: Ray ÷ local throughput at least 0.90.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

from specbatch.bench import machine_header
from specbatch.common.atomic_files import atomic_write_text
from specbatch.config import compose_job
from specbatch.pipeline import run_job
from specbatch.run.status_merge import finished_summary

GOAL = 0.90


def ray_report(rows: int, max_tokens: int, repeats: int, root: Path, stamp: str) -> tuple[str, Path]:
    """The local and the Ray runs, alternating; the report and where it was written."""
    common = [
        f"max_samples={rows}",
        f"sampling.max_tokens={max_tokens}",
        "tracking.experiment=bench",
        f"output_root={root}",
    ]
    ray = ["launcher=ray", f"ray.cpus_per_replica={os.cpu_count() or 1}"]
    runs: dict[str, list[tuple[float, float, float]]] = {"local": [], "ray": []}
    for repeat in range(repeats):
        for name, extra in (("local", []), ("ray", ray)):
            began = time.perf_counter()
            result = run_job(compose_job([*common, *extra, f"run_name=ray-bench-{name}-{stamp}", f"repeat={repeat}"]))
            wall = time.perf_counter() - began
            summary = finished_summary(result.folder.root)
            runs[name].append((summary.output_tokens_per_second, summary.engine_startup_seconds, wall))
    local, on_ray = (statistics.median(f[0] for f in runs[name]) for name in ("local", "ray"))
    ratio = on_ray / local
    lines = [
        f"# jobs/bench.py --ray, {time.strftime('%Y-%m-%d %H:%M')}",
        machine_header(),
        "",
        f"## (k) n-gram k=3, {rows} prompts x {max_tokens} new tokens, greedy, full batch: a local launch and "
        f"launcher=ray (a local Ray, 1 replica), {repeats} runs each, alternating",
        "",
        "| launch | output tok/s per run | median | engine start-up s (median) | job wall s (median) |",
        "|---|---|---|---|---|",
        *(_row(name, runs[name]) for name in ("local", "ray")),
        "",
        f"Ray / local throughput: {ratio:.3f} (goal at least {GOAL:.2f}: {'met' if ratio >= GOAL else 'missed'})",
    ]
    path = root / f"ray-{stamp}.md"
    atomic_write_text(path, "\n".join(lines) + "\n")
    return "\n".join(lines), path


def _row(name: str, figures: list[tuple[float, float, float]]) -> str:
    rates = " / ".join(f"{rate:.1f}" for rate, _, _ in figures)
    return (
        f"| {name} | {rates} | {statistics.median(f[0] for f in figures):.1f} | "
        f"{statistics.median(f[1] for f in figures):.1f} | {statistics.median(f[2] for f in figures):.1f} |"
    )
