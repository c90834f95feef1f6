"""Peak memory of one shard job as the number of prompts grows: it should stay flat (rows are read, generated and
written chunk by chunk). The engine is the dummy backend (engine.backend=dummy: no model, answers at once),
everything else is the real job code.

    .venv/bin/python jobs/bench_memory.py [--rows 1000 10000 100000] [--chunk-size 256]

Each size runs in a fresh process, so its peak resident memory (ru_maxrss) is its own.
"""

import argparse
import json
import logging
import sys
from pathlib import Path

from specbatch.bench.memory import child, memory_table

log = logging.getLogger("bench_memory")


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
    for text in memory_table(args.rows, args.chunk_size, __file__):
        print(text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
