"""(b) The embedded default's speedups: spec=none, ngram and suffix at several k, at batch size 1 and at full batch,
through the job's own code; speedup and equality from the compare analysis of the stored runs. Also runs (a)."""

from __future__ import annotations

import time
from pathlib import Path

from specbatch.analysis.report import Sources, run_compare
from specbatch.analysis.tables import format_comparison
from specbatch.bench import machine_header
from specbatch.bench.overhead import measure_overhead, overhead_lines
from specbatch.config import compose_job
from specbatch.pipeline import run_job

GOALS = {"batch 1": 3.0, "full batch": 2.0}
# (method, k) measured for (b); none first, it is the baseline.
CASES = [("none", None), ("ngram", 2), ("ngram", 3), ("ngram", 5), ("suffix", 3), ("suffix", 5), ("suffix", 8)]


def measure_speedups(common: list[str], root: Path, stamp: str) -> list[Path]:
    """One engine per (method, k) and batch size (the batch is the engine's max_num_seqs); returns the run folders."""
    folders = []
    for method, k in CASES:
        spec = [f"spec={method}"] + ([f"spec.num_speculative_tokens={k}"] if k else [])
        base = [*common, *spec, f"output_root={root}"]
        for batch in ("engine.max_num_seqs=1", "engine.max_num_seqs=null"):
            name = "bs1" if batch.endswith("=1") else "full"
            folders.append(run_job(compose_job([*base, batch, f"run_name={name}-{stamp}"])).folder.root)
    return folders


def speedup_bench(max_samples: int, root: Path, stamp: str, skip_overhead: bool) -> str:
    """(a) unless skipped, then (b); the report."""
    common = [f"max_samples={max_samples}", "tracking.experiment=bench"]

    overhead = None if skip_overhead else measure_overhead(common, root, stamp)
    folders = measure_speedups(common, root, stamp)
    result = run_compare(Sources(folders), out_dir=root / f"comparison-{stamp}")
    comparison = result.comparison

    lines = [f"# jobs/bench.py, {time.strftime('%Y-%m-%d %H:%M')}, {max_samples} prompts", machine_header(), ""]
    if overhead:
        lines += overhead_lines(overhead)
    lines += ["## (b) speedup over spec=none, same prompts, greedy", "", format_comparison(comparison), ""]
    full = max(r.batch_size for r in comparison.rows)
    for rec in comparison.recommendations:
        name = "batch 1" if rec.batch_size == 1 else "full batch" if rec.batch_size == full else None
        if name is None:
            continue
        goal = GOALS[name]
        lines.append(
            f"{name}: best {rec.method}" + (f" k={rec.k}" if rec.k else "") + f" {rec.speedup:.2f}x "
            f"(goal ≥ {goal}: {'met' if rec.speedup >= goal else 'MISSED'})"
        )
    lines.append(f"\ncomparison files and plots: {result.out_dir}")
    return "\n".join(lines)
