"""What the benchmarks share: a job's first prompts as token ids, the job (jobs/generate.py) run as a fresh process,
and the bare vLLM script (jobs/bench_bare.py) run as a fresh process on those prompts. (Composing the job's config is
specbatch.config.compose_job.)"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

from specbatch.common.environment import PROJECT_ROOT as PROJECT
from specbatch.config import JobConfig
from specbatch.data.prompts import load_tokenizer, render
from specbatch.data.rows import SourceRow, load_rows
from specbatch.run.folder import RunFolder, run_folders_below, shard_folders

# Where a benchmark's child process writes what it would print: this process's standard error (file descriptor 2,
# so also under pytest's capture). A benchmark prints its report on standard output, which `> report.md` then holds
# alone; the child jobs' logs (Hydra's console handler writes to standard output) still reach the terminal.
CHILD_OUTPUT = 2


def first_turn_prompts(job: JobConfig) -> tuple[list[SourceRow], list[list[int]]]:
    """The job's rows and the exact token ids of their first prompts, rendered as the job renders them."""
    tokenizer = load_tokenizer(job.model)
    rows = load_rows(job.dataset, job.max_samples)
    return rows, [render(r, 1, [], job.dataset, tokenizer).token_ids for r in rows]


def run_generate(
    overrides: list[str], output_root: Path, run_name: str | None = None
) -> tuple[Path, RunFolder, float]:
    """jobs/generate.py as a fresh process writing under ``output_root`` (a one-shard run): its run folder, its shard
    and the process's wall seconds (start-up included). With ``run_name`` the job is one of several in a shared
    ``output_root`` (each its own run folder, named ``<run_name>-<digest>``); without, the only run there."""
    began = time.perf_counter()
    named = [f"run_name={run_name}"] if run_name else []
    command = [sys.executable, str(PROJECT / "jobs/generate.py"), *overrides, *named, f"output_root={output_root}"]
    subprocess.run(command, cwd=PROJECT, check=True, stdout=CHILD_OUTPUT)
    wall = time.perf_counter() - began
    (folder,) = named_run_folders(output_root, run_name) if run_name else run_folders_below(Path(output_root) / "runs")
    (shard,) = shard_folders(folder)
    return folder, shard, wall


def named_run_folders(output_root: Path, run_name: str) -> list[Path]:
    """The run folders under ``output_root`` that ``run_name`` names (``<run_name>-<digest>[-rep<n>]``)."""
    pattern = re.compile(re.escape(run_name) + r"-[0-9a-f]+(-rep\d+)?")
    return [p for p in run_folders_below(Path(output_root) / "runs") if pattern.fullmatch(p.name)]


def run_bare(
    job: JobConfig, prompts: list[list[int]], path: Path, turns: list[list[str]] | None = None
) -> tuple[float, dict]:
    """jobs/bench_bare.py as a fresh process with this job's exact LLM arguments; (process wall, its own report).

    ``turns``: the rows' user turns for a multi-turn data set (``prompts`` are then their first turns)."""
    # Imported here: the memory benchmark's child composes its job from this module and measures its own peak
    # memory, so importing this module must not load the vLLM backend.
    from specbatch.backends.vllm.vllm_args import llm_kwargs, offline_environment, vllm_environment

    spec_file, out_file = path.with_suffix(".json"), path.with_suffix(".out.json")
    spec = {
        "llm_kwargs": llm_kwargs(job),
        # The job's own engine environment, one process or several included: the bare script is the same engine.
        "env": vllm_environment(job) | offline_environment(job),
        "prompts": prompts,
        "max_tokens": job.sampling.max_tokens,
        "batch_size": 0,
    }
    if turns is not None:
        spec["turns"] = turns
    spec_file.write_text(json.dumps(spec))
    began = time.perf_counter()
    subprocess.run(
        [sys.executable, str(PROJECT / "jobs/bench_bare.py"), str(spec_file), str(out_file)],
        check=True,
        stdout=CHILD_OUTPUT,
    )
    return time.perf_counter() - began, json.loads(out_file.read_text())
