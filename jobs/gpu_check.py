"""Run every GPU preset on a handful of prompts and print one table (the first thing to run on a GPU machine).

    make gpu-check                          # or: .venv/bin/python jobs/gpu_check.py [--max-samples 8]
    make gpu-check ARGS=--force-cpu         # CPU stand-ins of the same cases, to see the table's shape

Each preset (none, ngram, suffix, PARD with and without parallel drafting, eagle, eagle3, mtp) runs greedy in its own
process; the table says whether it loaded (or its error), tok/s, AL, rows identical to its spec=none and peak GPU
memory. It needs a CUDA GPU with a driver for CUDA 13 and the Hugging Face hub, and says so and exits with 2 when
the machine has neither.
"""

import argparse
import sys
import tempfile
from pathlib import Path

from specbatch.bench.gpu_check import CheckRefused, gpu_check


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-samples", type=int, default=8, help="prompts per preset (default 8)")
    parser.add_argument("--force-cpu", action="store_true", help="run the CPU stand-ins (the table's shape only)")
    parser.add_argument("--workdir", type=Path, help="keep the runs here (default: a temporary folder)")
    args = parser.parse_args()
    try:
        with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
            workdir = args.workdir or Path(tmp)
            print(gpu_check(force_cpu=args.force_cpu, max_samples=args.max_samples, workdir=workdir))
    except CheckRefused as exc:
        print(f"make gpu-check: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
