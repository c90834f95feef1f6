"""Benchmark (not a test): the job's overhead over a bare vLLM script, and the embedded default's speedups.

    .venv/bin/python jobs/bench.py [--max-samples 16] [--output-root outputs/bench] [--skip-overhead]
    .venv/bin/python jobs/bench.py --streaming [--rows 128] [--two-turn-rows 64] [--report before.md]

(a) Overhead: ``jobs/generate.py`` (default config: SmolLM2 + ngram k=3, bfloat16, 16 prompts, full batch) and
    ``jobs/bench_bare.py`` (a bare ``vllm.LLM`` script given the exact same ``LLM`` arguments and prompt token ids)
    each run as a fresh process; wall time minus engine start-up, job ÷ bare. Goal: ≤ 1.03. The bare script also
    runs spec=none, so vLLM's own speedup on the same prompts is printed beside the job's.
(b) Speedup: spec=none, ngram and suffix at several k, each measured at batch size 1 (engine.max_num_seqs=1: one
    request at a time) and at full batch (every prompt in the engine at once), greedy, on the default
    code-editing task, through the job's own code (``run_job``); speedup and equality come from jobs/compare's
    analysis of the stored runs. Goals: ≥ 3.0x at batch 1 and ≥ 2.0x at full batch with the best k.
(c) Keeping the engine full (issue 12; ``--streaming`` runs only this): spec=none and ngram, greedy, 256 new
    tokens, on humaneval_edit (128 rows) and on a two-turn HumanEval file written at bench time (64 rows; turn 2
    asks for type hints on the model's own answer). Per method, three fresh processes: the job with chunk_size=8,
    the job with one chunk, and the bare script with every prompt of a turn in one generate call. Output tok/s =
    output tokens ÷ generation seconds (start-up and warm-up excluded), read from the run folder's shard summary.
    Goals: chunk_size=8 ÷ one chunk ≥ 0.97 and job ÷ bare ≥ 0.97. The report is printed and written to a file.

One run per measurement on a shared, noisy 2-core machine: quote the ratios of one invocation together.
"""

import argparse
import json
import logging
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
from hydra import compose, initialize_config_dir

from specbatch.analysis.compare import format_comparison
from specbatch.analysis.report import Sources, run_compare
from specbatch.common.environment import git_commit
from specbatch.config import JobConfig, register_configs, to_job_config
from specbatch.data.prompts import load_tokenizer, render
from specbatch.data.rows import SourceRow, load_rows
from specbatch.engine.vllm_offline import llm_kwargs
from specbatch.run.folder import shard_folders
from specbatch.run.generate import run_job
from specbatch.run.records import read_rows

log = logging.getLogger("bench")
PROJECT = Path(__file__).resolve().parents[1]
GOALS = {"overhead": 1.03, "batch 1": 3.0, "full batch": 2.0}
# (method, k) measured for (b); none first, it is the baseline.
CASES = [("none", None), ("ngram", 2), ("ngram", 3), ("ngram", 5), ("suffix", 3), ("suffix", 5), ("suffix", 8)]


def compose_job(overrides: list[str]) -> JobConfig:
    with initialize_config_dir(config_dir=str(PROJECT / "conf"), version_base="1.3"):
        return to_job_config(compose(config_name="config", overrides=overrides))


def first_turn_prompts(job: JobConfig) -> tuple[list[SourceRow], list[list[int]]]:
    """The job's rows and the exact token ids of their first prompts, rendered as the job renders them."""
    tokenizer = load_tokenizer(job.model)
    rows = load_rows(job.dataset, job.max_samples)
    return rows, [render(r, 1, [], job.dataset, tokenizer).token_ids for r in rows]


def run_bare(
    job: JobConfig, prompts: list[list[int]], path: Path, turns: list[list[str]] | None = None
) -> tuple[float, dict]:
    """jobs/bench_bare.py as a fresh process with this job's exact LLM arguments; (process wall, its own report).

    ``turns``: the rows' user turns for a multi-turn data set (``prompts`` are then their first turns)."""
    spec_file, out_file = path.with_suffix(".json"), path.with_suffix(".out.json")
    spec = {
        "llm_kwargs": llm_kwargs(job),
        "env": {"VLLM_CPU_KVCACHE_SPACE": str(job.engine.cpu_kvcache_space_gib or 2)},
        "prompts": prompts,
        "max_tokens": job.sampling.max_tokens,
        "batch_size": 0,
    }
    if turns is not None:
        spec["turns"] = turns
    spec_file.write_text(json.dumps(spec))
    began = time.perf_counter()
    subprocess.run([sys.executable, str(PROJECT / "jobs/bench_bare.py"), str(spec_file), str(out_file)], check=True)
    return time.perf_counter() - began, json.loads(out_file.read_text())


def measure_overhead(common: list[str], root: Path, stamp: str) -> dict:
    """The job and the bare script as fresh processes (job first); then the bare script for spec=none too, so
    vLLM's own speedup on these prompts is known without the job in between."""
    job_overrides = [*common, f"output_root={root}", f"run_name=overhead-{stamp}"]
    job = compose_job(job_overrides)
    _, prompts = first_turn_prompts(job)

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
        for batch in ("engine.max_num_seqs=1", "engine.max_num_seqs=null"):
            name = "bs1" if batch.endswith("=1") else "full"
            folders.append(run_job(compose_job([*base, batch, f"run_name={name}-{stamp}"])).folder.root)
    return folders


# (c) keeping the engine full (issue 12).
STREAMING_GOAL = 0.97
STREAMING_METHODS = ("none", "ngram")
STREAMING_MAX_TOKENS = 256
# Turn 2 of the two-turn data set; turn 1 is humaneval_edit's own prompt.
FOLLOW_UP = (
    "Now also add type hints to every parameter and to the return value. Keep the comments, and reply with the "
    "complete function in one Python code block."
)


@dataclass(frozen=True)
class Throughput:
    """One measured run: output rows (every turn), output tokens and generation seconds (engine start-up and
    warm-up excluded), and the process's whole wall time for reference."""

    rows: int
    output_tokens: int
    generation_seconds: float
    wall_seconds: float
    # Job runs: completions equal token for token to the bare script's (bfloat16 may differ with batch shape).
    identical: int | None = None

    @property
    def tokens_per_second(self) -> float:
        return self.output_tokens / self.generation_seconds


@dataclass(frozen=True)
class StreamingCase:
    dataset: str
    method: str
    chunked: Throughput
    one_chunk: Throughput
    bare: Throughput

    @property
    def chunk_ratio(self) -> float:
        """Job with chunk_size=8 ÷ job with one chunk."""
        return self.chunked.tokens_per_second / self.one_chunk.tokens_per_second

    @property
    def bare_ratio(self) -> float:
        """Job (one chunk) ÷ the bare script."""
        return self.one_chunk.tokens_per_second / self.bare.tokens_per_second


def write_two_turn_file(path: Path) -> Path:
    """An MT-Bench-style JSON Lines file from the packaged HumanEval: turn 1 is humaneval_edit's prompt, turn 2
    a follow-up on the model's own answer. Built at bench time, every problem (the runs take the first rows)."""
    rows = load_rows(compose_job(["dataset=humaneval_edit"]).dataset, None)
    with path.open("w") as out:
        for row in rows:
            out.write(json.dumps({"id": row.row_id, "turns": [row.text, FOLLOW_UP]}) + "\n")
    log.info("two-turn data set: %d rows in %s", len(rows), path)
    return path


def run_job_process(overrides: list[str], output_root: Path) -> tuple[Throughput, dict[tuple[str, int], list[int]]]:
    """jobs/generate.py as a fresh process writing under its own ``output_root``; its figures from the run folder's
    shard summary, its completions (by row id and turn) from its Parquet parts."""
    began = time.perf_counter()
    command = [sys.executable, str(PROJECT / "jobs/generate.py"), *overrides, f"output_root={output_root}"]
    subprocess.run(command, cwd=PROJECT, check=True)
    wall = time.perf_counter() - began
    (run_folder,) = {p.parent for p in output_root.glob("runs/*/*/*/run.json")}
    (shard,) = shard_folders(run_folder)
    stats = shard.read_summary()
    if stats.error_rows:
        log.warning("%s: %d error rows (not generated)", run_folder, stats.error_rows)
    completions = {}
    for part in shard.parts():
        for r in pq.read_table(part, columns=["row_id", "turn", "completion_token_ids"]).to_pylist():
            completions[(r["row_id"], r["turn"])] = r["completion_token_ids"]
    figures = Throughput(stats.rows, stats.output_tokens, stats.generation_seconds, wall)
    return figures, completions


def measure_streaming_case(name: str, data: list[str], method: str, folder: Path, stamp: str) -> StreamingCase:
    """The job with chunk_size=8 and with one chunk, then the bare script with all prompts in one generate call
    per turn, all three as fresh processes on the same rows."""
    overrides = [*data, f"spec={method}", f"sampling.max_tokens={STREAMING_MAX_TOKENS}", "tracking=off"]
    job = compose_job(overrides)
    rows, prompts = first_turn_prompts(job)
    turns = [r.turns for r in rows] if all(r.turns for r in rows) else None
    # Output rows in the bare script's order: every row's turn 1, then every turn 2, ...
    keys = [(r.row_id, t) for t in range(1, max(r.num_turns for r in rows) + 1) for r in rows if r.num_turns >= t]

    runs = {}
    for label, chunk_size in (("chunk8", 8), ("one-chunk", len(rows))):
        log.info("%s %s: job with chunk_size=%d on %d rows", name, method, chunk_size, len(rows))
        run = [*overrides, f"chunk_size={chunk_size}", f"run_name=streaming-{stamp}-{label}"]
        runs[label] = run_job_process(run, folder / f"{name}-{method}-{label}")
    log.info("%s %s: bare vLLM script on %d rows", name, method, len(rows))
    wall, bare = run_bare(job, prompts, folder / f"bare-{name}-{method}", turns)
    bare_tokens = dict(zip(keys, bare["token_ids"], strict=True))

    def with_identical(figures: Throughput, completions: dict[tuple[str, int], list[int]]) -> Throughput:
        same = sum(completions.get(key) == tokens for key, tokens in bare_tokens.items())
        return Throughput(figures.rows, figures.output_tokens, figures.generation_seconds, figures.wall_seconds, same)

    return StreamingCase(
        dataset=name,
        method=method,
        chunked=with_identical(*runs["chunk8"]),
        one_chunk=with_identical(*runs["one-chunk"]),
        bare=Throughput(len(keys), bare["output_tokens"], bare["generation_seconds"], wall),
    )


def measure_streaming(rows: int, two_turn_rows: int, root: Path, stamp: str) -> list[StreamingCase]:
    folder = root / f"streaming-{stamp}"
    folder.mkdir(parents=True)
    two_turn = write_two_turn_file(folder / "humaneval_edit_two_turn.jsonl")
    datasets = {
        "humaneval_edit": ["dataset=humaneval_edit", f"max_samples={rows}"],
        "two-turn": [
            "dataset=local",
            f"dataset.path={two_turn}",
            "dataset.prompt_format=turns",
            "dataset.turns_column=turns",
            "dataset.id_column=id",
            f"max_samples={two_turn_rows}",
        ],
    }
    return [
        measure_streaming_case(name, data, method, folder, stamp)
        for name, data in datasets.items()
        for method in STREAMING_METHODS
    ]


def streaming_report(cases: list[StreamingCase], rows: int, two_turn_rows: int, seconds: float) -> str:
    def verdict(ratio: float) -> str:
        return f"{ratio:.3f} ({'met' if ratio >= STREAMING_GOAL else 'MISSED'})"

    lines = [
        f"# jobs/bench.py --streaming, {time.strftime('%Y-%m-%d %H:%M')}, commit {git_commit()}",
        "",
        f"Keeping the engine full (issue 12): humaneval_edit ({rows} rows) and a two-turn HumanEval data set "
        f"({two_turn_rows} rows, turn 2 = a follow-up on the model's answer), greedy, "
        f"max_tokens={STREAMING_MAX_TOKENS}, default model and engine. Output tok/s = output tokens ÷ generation "
        "seconds (engine start-up and warm-up excluded; every turn counted). Each run a fresh process; process wall "
        "s (start-up included) only for reference. Identical = completions equal token for token to the bare "
        "script's.",
        "",
        "| data set | method | run | rows | output tokens | generation s | tok/s | process wall s | identical |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for case in cases:
        for label, run in (("job chunk_size=8", case.chunked), ("job one chunk", case.one_chunk), ("bare", case.bare)):
            identical = "-" if run.identical is None else f"{run.identical}/{case.bare.rows}"
            lines.append(
                f"| {case.dataset} | {case.method} | {label} | {run.rows} | {run.output_tokens} | "
                f"{run.generation_seconds:.1f} | {run.tokens_per_second:.1f} | {run.wall_seconds:.1f} | {identical} |"
            )
    lines += [
        "",
        f"| data set | method | chunk_size=8 ÷ one chunk (goal ≥ {STREAMING_GOAL}) | job ÷ bare (goal ≥ "
        f"{STREAMING_GOAL}) |",
        "|---|---|---|---|",
    ]
    lines += [f"| {c.dataset} | {c.method} | {verdict(c.chunk_ratio)} | {verdict(c.bare_ratio)} |" for c in cases]
    lines += ["", f"benchmark wall time: {seconds / 60:.1f} min"]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-samples", type=int, default=16)
    parser.add_argument("--output-root", type=Path, default=PROJECT / "outputs" / "bench")
    parser.add_argument("--skip-overhead", action="store_true")
    parser.add_argument("--streaming", action="store_true", help="run only (c), keeping the engine full")
    parser.add_argument("--rows", type=int, default=128, help="(c): humaneval_edit rows")
    parser.add_argument("--two-turn-rows", type=int, default=64, help="(c): rows of the two-turn data set")
    parser.add_argument("--report", type=Path, help="(c): also write the report here (default: in --output-root)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    register_configs()
    root = args.output_root.resolve()
    root.mkdir(parents=True, exist_ok=True)
    # Fresh run folders per invocation: a finished run would otherwise be found and not measured again.
    stamp = time.strftime("%Y%m%d-%H%M%S")
    if args.streaming:
        began = time.perf_counter()
        cases = measure_streaming(args.rows, args.two_turn_rows, root, stamp)
        report = streaming_report(cases, args.rows, args.two_turn_rows, time.perf_counter() - began)
        path = args.report or root / f"streaming-{stamp}.md"
        path.write_text(report + "\n")
        print(report)
        log.info("report written to %s", path)
        return 0
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
