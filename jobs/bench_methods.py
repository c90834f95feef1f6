"""Run every speculative method on the same prompts and print AL, tok/s and whether greedy output matched spec=none.

    .venv/bin/python jobs/bench_methods.py [--max-samples 16] [--max-tokens 256] [--output-root outputs/bench]

Real methods (none, ngram, suffix) run on the embedded SmolLM2; the checkpoint methods run on the tiny random
family (no real draft or head exists offline), each against its own spec=none on the same prompts. Float32 and
greedy, so "matched" must be yes everywhere. One engine at a time; one run each, so read ratios, not absolutes.
"""

import argparse
import logging
import sys

from specbatch.bench.all_methods import methods_table, run_methods
from specbatch.config import register_configs

log = logging.getLogger("bench_methods")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-samples", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--output-root", default="outputs/bench")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    register_configs()
    print(methods_table(run_methods(args.max_samples, args.max_tokens, args.output_root)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
