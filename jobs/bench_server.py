"""The same prompts offline and through a vLLM server started for the same config: tok/s, AL, identical rows.

    .venv/bin/python jobs/bench_server.py [--max-samples 32] [--max-tokens 128] [--batch 8] [--port 8017]

For spec=none and spec=ngram on the embedded SmolLM2 (float32, greedy): the offline job, then jobs/serve.py's
server for the same overrides and the job with engine.backend=server. Completions must be identical; the server's
AL (from its /metrics) must equal the offline one. One engine at a time; one run each, so read ratios.
"""

import argparse
import logging
import sys

from specbatch.bench.offline_vs_server import run_offline_and_server, server_table
from specbatch.config import register_configs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-samples", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8, help="engine.max_num_seqs offline = requests in flight")
    parser.add_argument("--port", type=int, default=8017)
    parser.add_argument("--output-root", default="outputs/bench")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    register_configs()
    measured = run_offline_and_server(args.max_samples, args.max_tokens, args.batch, args.port, args.output_root)
    print(server_table(measured))
    return 0


if __name__ == "__main__":
    sys.exit(main())
