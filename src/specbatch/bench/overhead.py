"""(a) The job's overhead: jobs/generate.py and the bare vLLM script on the same prompts, each a fresh process;
wall time minus engine start-up, job ÷ bare."""

from __future__ import annotations

from pathlib import Path

from specbatch.bench.processes import first_turn_prompts, run_bare, run_generate
from specbatch.config import compose_job
from specbatch.pipeline import run_job
from specbatch.run.records.output_parts import read_rows

OVERHEAD_GOAL = 1.03


def measure_overhead(common: list[str], root: Path, stamp: str) -> dict:
    """The job and the bare script as fresh processes (job first); then the bare script for spec=none too, so
    vLLM's own speedup on these prompts is known without the job in between."""
    job_overrides = [*common, f"output_root={root}", f"run_name=overhead-{stamp}"]
    job = compose_job(job_overrides)
    _, prompts = first_turn_prompts(job)

    _, _, job_wall = run_generate(common, root, f"overhead-{stamp}")
    result = run_job(job)  # finds the finished run: its summary and rows, without generating again
    assert not result.generated
    job_tokens = [r["completion_token_ids"] for r in read_rows(result.parquet_files)]

    bare_wall, bare = run_bare(job, prompts, root / f"bare-{stamp}")
    _, bare_none = run_bare(compose_job([*job_overrides, "spec=none"]), prompts, root / f"bare-none-{stamp}")
    job_start = result.summary.engine_startup_seconds
    return {
        "job_wall": job_wall,
        "job_startup": job_start,
        "job_generation": result.summary.generation_seconds,
        "bare_wall": bare_wall,
        "bare_startup": bare["engine_startup_seconds"],
        "bare_generation": bare["generation_seconds"],
        "ratio": (job_wall - job_start) / (bare_wall - bare["engine_startup_seconds"]),
        "identical": sum(a == b for a, b in zip(job_tokens, bare["token_ids"], strict=True)),
        "rows": len(prompts),
        "label": job.spec.label,
        "bare_speedup": (bare["output_tokens"] / bare["generation_seconds"])
        / (bare_none["output_tokens"] / bare_none["generation_seconds"]),
    }


def overhead_lines(o: dict) -> list[str]:
    """Section (a) of the report."""
    return [
        "## (a) job overhead (default config, one fresh process each)",
        "| | process wall s | engine start s | wall − start s | generate s |",
        "|---|---|---|---|---|",
        f"| jobs/generate.py | {o['job_wall']:.1f} | {o['job_startup']:.1f} | "
        f"{o['job_wall'] - o['job_startup']:.1f} | {o['job_generation']:.1f} |",
        f"| bare vLLM script | {o['bare_wall']:.1f} | {o['bare_startup']:.1f} | "
        f"{o['bare_wall'] - o['bare_startup']:.1f} | {o['bare_generation']:.1f} |",
        "",
        f"overhead (wall − start, job ÷ bare): {o['ratio']:.3f} (goal ≤ {OVERHEAD_GOAL}: "
        f"{'met' if o['ratio'] <= OVERHEAD_GOAL else 'MISSED'}); "
        f"identical completions job vs bare: {o['identical']}/{o['rows']}",
        f"bare vLLM script alone, {o['label']} over spec=none at full batch on these prompts: "
        f"{o['bare_speedup']:.2f}x",
        "",
    ]
