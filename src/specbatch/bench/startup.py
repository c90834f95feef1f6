"""(e) Start-up: a small job from launch to exit, as a user runs it (a fresh ``jobs/generate.py`` process with MLflow
tracking on a sqlite store of its own), for two or more checkouts of the project side by side (before and after a
change to the start-up path). The checkouts run in turn, repeat by repeat, so a noisy machine weighs on each alike.

Per checkout: the median process wall time, the engine's own start-up and warm-up (the shard summary's figures) and
the rest (imports, config, data, MLflow, writing), which is what a change to the job's own start-up moves.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from specbatch.bench import machine_header

# A job small enough that start-up dominates: four prompts, sixteen new tokens each.
WORKLOAD = ["max_samples=4", "sampling.max_tokens=16", "chunk_size=4"]


def _one_launch(checkout: Path, out: Path) -> tuple[float, float]:
    """(process wall seconds, engine start-up + warm-up seconds) of one launch of ``checkout``'s jobs/generate.py."""
    env = {**os.environ, "PYTHONPATH": str(checkout / "src"), "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, str(checkout / "jobs" / "generate.py"), *WORKLOAD, f"output_root={out}"]
    began = time.perf_counter()
    subprocess.run(command, cwd=checkout, env=env, check=True, capture_output=True)
    wall = time.perf_counter() - began
    summary = json.loads(next(out.rglob("stats/shard-00000-of-00001.json")).read_text())
    return wall, summary["engine_startup_seconds"] + summary["warmup_seconds"]


def startup_bench(checkouts: list[Path], repeats: int, root: Path, stamp: str) -> str:
    """Launch each checkout ``repeats`` times in turn; a report of the medians, the first checkout as the base."""
    measured: dict[Path, list[tuple[float, float]]] = {c: [] for c in checkouts}
    for repeat in range(repeats):
        for number, checkout in enumerate(checkouts):
            measured[checkout].append(_one_launch(checkout, root / f"startup-{stamp}" / f"{number}-{repeat}"))
    lines = [
        machine_header(),
        f"(e) start-up: jobs/generate.py {' '.join(WORKLOAD)} (tracking=sqlite), {repeats} launches per checkout, "
        "in turn; medians",
        f"{'checkout':<40} {'wall s':>8} {'engine s':>9} {'rest s':>8} {'wall ÷ first':>13}",
    ]
    base = statistics.median(w for w, _ in measured[checkouts[0]])
    for checkout in checkouts:
        walls = [w for w, _ in measured[checkout]]
        engines = [e for _, e in measured[checkout]]
        rest = statistics.median(w - e for w, e in measured[checkout])
        wall = statistics.median(walls)
        lines.append(
            f"{str(checkout):<40} {wall:>8.1f} {statistics.median(engines):>9.1f} {rest:>8.1f} {wall / base:>13.3f}"
        )
        lines.append(f"{'':<40} walls: {', '.join(f'{w:.1f}' for w in walls)}")
    return "\n".join(lines)
