"""Peak memory of one shard job as the number of prompts grows (jobs/bench_memory.py), on the dummy engine. Each size
runs in a fresh process (the job script again, with ``--child``), so its peak resident memory (ru_maxrss) is its own.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path


def child(rows: int, chunk_size: int, workdir: Path) -> dict:
    """One size in this process: a JSON Lines file of ``rows`` questions, the job on it, its peak memory."""
    # Imported here: the parent process only starts the children and needs none of the job's code.
    from specbatch.config import compose_job
    from specbatch.pipeline import run_job

    data = workdir / f"rows-{rows}.jsonl"
    with open(data, "w") as out:
        for i in range(rows):
            out.write(json.dumps({"id": f"q{i}", "q": f"Question number {i}: what comes after {i}?"}) + "\n")
    overrides = [
        "spec=none",
        "engine.backend=dummy",
        "tracking=off",
        "dataset=local",
        f"dataset.path={data}",
        "dataset.template='{q}'",
        "dataset.id_column=id",
        f"chunk_size={chunk_size}",
        f"output_root={workdir / 'out'}",
        "sampling.max_tokens=16",
        "max_samples=null",
    ]
    job = compose_job(overrides)
    began = time.perf_counter()
    result = run_job(job)
    seconds = time.perf_counter() - began
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"rows": result.summary.rows, "parts": len(result.parquet_files), "seconds": seconds, "peak_mb": peak_mb}


def memory_table(sizes: list[int], chunk_size: int, script: str) -> Iterator[str]:
    """The Markdown table, a row as each size finishes (the header with the first); ``script`` runs one size when
    given ``--child ROWS --chunk-size N --workdir DIR`` and prints ``child``'s result as its last line."""
    lines = ["| prompts | parts | seconds | peak RSS (MB) | vs smallest |", "|---|---|---|---|---|"]
    first = None
    for rows in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [sys.executable, script, "--child", str(rows), "--chunk-size", str(chunk_size)]
            done = subprocess.run([*cmd, "--workdir", tmp], capture_output=True, text=True, check=True)
        stats = json.loads(done.stdout.strip().splitlines()[-1])
        first = first or stats["peak_mb"]
        lines.append(
            f"| {stats['rows']:,} | {stats['parts']} | {stats['seconds']:.1f} | {stats['peak_mb']:.0f} | "
            f"{stats['peak_mb'] / first:.2f} |"
        )
        yield lines[-1] if len(lines) > 3 else "\n".join(lines)
