"""Benchmark (not a test): the job's overhead over a bare vLLM script, and the embedded default's speedups.

    .venv/bin/python jobs/bench.py [--max-samples 16] [--output-root outputs/bench] [--skip-overhead]

(a) Overhead: ``jobs/generate.py`` (default config: SmolLM2 + ngram k=3, bfloat16, 16 prompts, full batch) and
    ``jobs/bench_bare.py`` (a bare ``vllm.LLM`` script given the exact same ``LLM`` arguments and prompt token ids)
    each run as a fresh process; wall time minus engine start-up, job ÷ bare. Goal: ≤ 1.03. The bare script also
    runs spec=none, so vLLM's own speedup on the same prompts is printed beside the job's.
(b) Speedup: spec=none, ngram and suffix at several k, each measured at batch size 1 (engine.max_num_seqs=1: one
    request at a time) and at full batch (every prompt in the engine at once), greedy, on the default
    code-editing task, through the job's own code (``run_job``); speedup and equality come from jobs/compare's
    analysis of the stored runs. Goals: ≥ 3.0x at batch 1 and ≥ 2.0x at full batch with the best k.

One run per measurement on a shared, noisy 2-core machine: quote the ratios of one invocation together.
"""

import argparse
import json
import logging
import subprocess
import sys
import time
from pathlib import Path

from hydra import compose, initialize_config_dir

from specbatch.compare import format_comparison
from specbatch.config import JobConfig, register_configs, to_job_config
from specbatch.data import load_rows
from specbatch.engine import start_engine
from specbatch.engine.vllm_offline import llm_kwargs
from specbatch.generate import run_job
from specbatch.prompts import load_tokenizer, render
from specbatch.records import read_rows
from specbatch.report import Sources, run_compare

log = logging.getLogger("bench")
PROJECT = Path(__file__).resolve().parents[1]
GOALS = {"overhead": 1.03, "batch 1": 3.0, "full batch": 2.0}
# (method, k) measured for (b); none first, it is the baseline.
CASES = [("none", None), ("ngram", 2), ("ngram", 3), ("ngram", 5), ("suffix", 3), ("suffix", 5), ("suffix", 8)]


def compose_job(overrides: list[str]) -> JobConfig:
    with initialize_config_dir(config_dir=str(PROJECT / "conf"), version_base="1.3"):
        return to_job_config(compose(config_name="config", overrides=overrides))


def run_bare(job: JobConfig, prompts: list[list[int]], path: Path) -> tuple[float, dict]:
    """jobs/bench_bare.py as a fresh process with this job's exact LLM arguments; (process wall, its own report)."""
    spec_file, out_file = path.with_suffix(".json"), path.with_suffix(".out.json")
    spec_file.write_text(
        json.dumps(
            {
                "llm_kwargs": llm_kwargs(job),
                "env": {"VLLM_CPU_KVCACHE_SPACE": str(job.engine.cpu_kvcache_space_gib or 2)},
                "prompts": prompts,
                "max_tokens": job.sampling.max_tokens,
                "batch_size": 0,
            }
        )
    )
    began = time.perf_counter()
    subprocess.run([sys.executable, str(PROJECT / "jobs/bench_bare.py"), str(spec_file), str(out_file)], check=True)
    return time.perf_counter() - began, json.loads(out_file.read_text())


def measure_overhead(common: list[str], root: Path, stamp: str) -> dict:
    """The job and the bare script as fresh processes (job first); then the bare script for spec=none too, so
    vLLM's own speedup on these prompts is known without the job in between."""
    job_overrides = [*common, f"output_root={root}", f"run_name=overhead-{stamp}"]
    job = compose_job(job_overrides)
    tokenizer = load_tokenizer(job.model)
    prompts = [render(r, 1, [], job.dataset, tokenizer).token_ids for r in load_rows(job.dataset, job.max_samples)]

    began = time.perf_counter()
    subprocess.run([sys.executable, str(PROJECT / "jobs/generate.py"), *job_overrides], cwd=PROJECT, check=True)
    job_wall = time.perf_counter() - began
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


def measure_speedups(common: list[str], root: Path, stamp: str) -> list[Path]:
    """One engine per (method, k) and batch size (the batch is the engine's max_num_seqs); returns the run folders."""
    folders = []
    for method, k in CASES:
        spec = [f"spec={method}"] + ([f"spec.num_speculative_tokens={k}"] if k else [])
        base = [*common, *spec, f"output_root={root}"]
        for job in (
            compose_job([*base, "engine.max_num_seqs=1", f"run_name=bs1-{stamp}"]),
            compose_job([*base, f"run_name=full-{stamp}"]),
        ):
            engine = start_engine(job)
            try:
                folders.append(run_job(job, engine=engine).layout.root)
            finally:
                engine.close()
    return folders


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-samples", type=int, default=16)
    parser.add_argument("--output-root", type=Path, default=PROJECT / "outputs" / "bench")
    parser.add_argument("--skip-overhead", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    register_configs()
    root = args.output_root.resolve()
    root.mkdir(parents=True, exist_ok=True)
    # Fresh run folders per invocation: a finished run would otherwise be found and not measured again.
    stamp = time.strftime("%Y%m%d-%H%M%S")
    common = [f"max_samples={args.max_samples}", "tracking.experiment=bench"]

    overhead = None if args.skip_overhead else measure_overhead(common, root, stamp)
    folders = measure_speedups(common, root, stamp)
    result = run_compare(Sources(folders), out_dir=root / f"comparison-{stamp}")
    comparison = result.comparison

    lines = [f"# jobs/bench.py, {time.strftime('%Y-%m-%d %H:%M')}, {args.max_samples} prompts", ""]
    if overhead:
        o = overhead
        lines += [
            "## (a) job overhead (default config, one fresh process each)",
            "| | process wall s | engine start s | wall − start s | generate s |",
            "|---|---|---|---|---|",
            f"| jobs/generate.py | {o['job_wall']:.1f} | {o['job_startup']:.1f} | "
            f"{o['job_wall'] - o['job_startup']:.1f} | {o['job_generation']:.1f} |",
            f"| bare vLLM script | {o['bare_wall']:.1f} | {o['bare_startup']:.1f} | "
            f"{o['bare_wall'] - o['bare_startup']:.1f} | {o['bare_generation']:.1f} |",
            "",
            f"overhead (wall − start, job ÷ bare): {o['ratio']:.3f} (goal ≤ {GOALS['overhead']}: "
            f"{'met' if o['ratio'] <= GOALS['overhead'] else 'MISSED'}); "
            f"identical completions job vs bare: {o['identical']}/{o['rows']}",
            f"bare vLLM script alone, {o['label']} over spec=none at full batch on these prompts: "
            f"{o['bare_speedup']:.2f}x",
            "",
        ]
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
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
