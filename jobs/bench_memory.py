"""Peak memory of one shard job as the number of prompts grows: it should stay flat (rows are read, generated and
written chunk by chunk). The engine is the dummy backend (engine.backend=dummy: no model, answers at once),
everything else is the real job code.

    .venv/bin/python jobs/bench_memory.py [--rows 1000 10000 100000] [--chunk-size 256]

Each size runs in a fresh process, so its peak resident memory (ru_maxrss) is its own.
"""

import argparse
import json
import logging
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

log = logging.getLogger("bench_memory")


def child(rows: int, chunk_size: int, workdir: Path) -> dict:
    from hydra import compose, initialize_config_dir

    from specbatch.config import register_configs, to_job_config
    from specbatch.run.generate import run_job

    data = workdir / f"rows-{rows}.jsonl"
    with open(data, "w") as out:
        for i in range(rows):
            out.write(json.dumps({"id": f"q{i}", "q": f"Question number {i}: what comes after {i}?"}) + "\n")
    register_configs()
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
    conf = str(Path(__file__).resolve().parents[1] / "conf")
    with initialize_config_dir(config_dir=conf, version_base="1.3"):
        job = to_job_config(compose(config_name="config", overrides=overrides))
    began = time.perf_counter()
    result = run_job(job)
    seconds = time.perf_counter() - began
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"rows": result.summary.rows, "parts": len(result.parquet_files), "seconds": seconds, "peak_mb": peak_mb}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--chunk-size", type=int, default=256)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.child:
        print(json.dumps(child(args.child, args.chunk_size, args.workdir)))
        return 0
    lines = ["| prompts | parts | seconds | peak RSS (MB) | vs smallest |", "|---|---|---|---|---|"]
    first = None
    for rows in args.rows:
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [sys.executable, __file__, "--child", str(rows), "--chunk-size", str(args.chunk_size)]
            done = subprocess.run([*cmd, "--workdir", tmp], capture_output=True, text=True, check=True)
        stats = json.loads(done.stdout.strip().splitlines()[-1])
        first = first or stats["peak_mb"]
        lines.append(
            f"| {stats['rows']:,} | {stats['parts']} | {stats['seconds']:.1f} | {stats['peak_mb']:.0f} | "
            f"{stats['peak_mb'] / first:.2f} |"
        )
        print(lines[-1] if len(lines) > 3 else "\n".join(lines), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
