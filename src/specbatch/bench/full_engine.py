"""(c) Keeping the engine full (issue 12): spec=none and ngram on humaneval_edit and on a two-turn HumanEval file,
each as the job with chunk_size=8, the job with one chunk, and the bare script with every prompt of a turn in one
generate call; output tok/s from the run folder's shard summary."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from specbatch.bench import machine_header
from specbatch.bench.processes import first_turn_prompts, run_bare, run_generate
from specbatch.common.environment import git_commit
from specbatch.config import compose_job
from specbatch.data.rows import load_rows

log = logging.getLogger(__name__)

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
    run_folder, shard, wall = run_generate(overrides, output_root)
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
        machine_header(),
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


def streaming_bench(rows: int, two_turn_rows: int, root: Path, stamp: str, report: Path | None) -> tuple[str, Path]:
    """(c) only: the report, also written to ``report`` (default: in ``root``); returns it and where it went."""
    began = time.perf_counter()
    cases = measure_streaming(rows, two_turn_rows, root, stamp)
    text = streaming_report(cases, rows, two_turn_rows, time.perf_counter() - began)
    path = report or root / f"streaming-{stamp}.md"
    path.write_text(text + "\n")
    return text, path
