"""jobs/bench.py's command line: which benchmark of specbatch.bench (a)-(k) runs, and its sizes."""

from __future__ import annotations

import argparse
from pathlib import Path

from specbatch.bench.auto_bench import DEFAULT_CELLS, cell_list
from specbatch.bench.schedule_sweep import int_list


def bench_arguments(description: str, output_root: Path) -> argparse.ArgumentParser:
    """The parser; ``output_root``: where reports and runs go by default."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--max-samples", type=int, default=16)
    parser.add_argument("--output-root", type=Path, default=output_root)
    parser.add_argument("--skip-overhead", action="store_true")
    parser.add_argument("--streaming", action="store_true", help="run only (c), keeping the engine full")
    parser.add_argument(
        "--rows", type=int, help="(c), (f), (g), (k): rows (default 128 for (c), (k); 64 for (f); 1000 for (g))"
    )
    parser.add_argument("--two-turn-rows", type=int, help="(c), (f): two-turn rows (default 64 for (c), 32 for (f))")
    parser.add_argument("--report", type=Path, help="(c): also write the report here (default: in --output-root)")
    parser.add_argument("--schedule", action="store_true", help="run (a) and (d), the k schedule")
    parser.add_argument("--batch-sizes", type=int_list, default=[1, 4, 16, 64], help="(d): e.g. 1,4,16,64")
    parser.add_argument("--ks", type=int_list, default=[1, 2, 3, 5, 8], help="(d): ngram's k, e.g. 1,2,3,5,8")
    parser.add_argument("--repeats", type=int, default=3, help="(d), (g), (i): repeats of each set-up")
    parser.add_argument("--schedule-prompts", type=int, default=64, help="(d): prompts (at least the largest batch)")
    parser.add_argument("--schedule-max-tokens", type=int, default=32, help="(d): new tokens per prompt")
    parser.add_argument("--schedule-dir", type=Path, help="(d): output root of its runs (reuse one to resume)")
    parser.add_argument("--predict", action="store_true", help="run only (f), predicted beside measured")
    parser.add_argument("--predict-max-tokens", type=int, default=128, help="(f), (k): new tokens per turn")
    parser.add_argument(
        "--predict-sampling", choices=["greedy", "sampled"], default="greedy", help="(f): sampled: at full batch only"
    )
    parser.add_argument("--stamp", help="(f), (g): an earlier run's stamp: its finished runs are read, not run again")
    parser.add_argument("--auto", action="store_true", help="run only (g), spec=auto against the fixed set-ups")
    parser.add_argument("--cells", type=cell_list, default=DEFAULT_CELLS, help="(g): workload@batch, e.g. chat@full")
    parser.add_argument("--setups", help="(g): the sweep's set-ups, e.g. none,ngram-k3 (default: auto's candidates)")
    parser.add_argument("--sweep-rows", type=int, default=200, help="(g): rows of the short sweep")
    parser.add_argument(
        "--from-round", type=int, default=1, help="(g): the first round run and counted (earlier ones: not read)"
    )
    parser.add_argument("--auto-max-tokens", type=int, default=128, help="(g): new tokens per row")
    parser.add_argument("--startup", type=Path, nargs="+", metavar="CHECKOUT", help="run only (e), these checkouts")
    parser.add_argument("--sampling", action="store_true", help="run only (h), n=4 sampling and the lossless check")
    parser.add_argument("--simulate", action="store_true", help="run only (i), spec=simulate against real n-gram")
    parser.add_argument("--ray", action="store_true", help="run only (k), a local launch against launcher=ray")
    parser.add_argument("--drafter", action="store_true", help="run only (l), a trained EAGLE-3 head (--rows 48)")
    parser.add_argument("--verification", action="store_true", help="run only (j), block against standard (GPU)")
    return parser
