"""Benchmark (not a test): the job's overhead over a bare vLLM script, and the embedded default's speedups.

    .venv/bin/python jobs/bench.py [--max-samples 16] [--output-root outputs/bench] [--skip-overhead]
    .venv/bin/python jobs/bench.py --streaming [--rows 128] [--two-turn-rows 64] [--report before.md]
    .venv/bin/python jobs/bench.py --schedule [--batch-sizes 1,4,16,64] [--ks 1,2,3,5,8] [--repeats 3]
        [--schedule-prompts 64] [--schedule-max-tokens 32] [--schedule-dir DIR] [--skip-overhead]
    .venv/bin/python jobs/bench.py --startup CHECKOUT [CHECKOUT ...] [--repeats 3]
    .venv/bin/python jobs/bench.py --predict [--rows 64] [--two-turn-rows 32] [--predict-max-tokens 128] [--stamp S]
    .venv/bin/python jobs/bench.py --auto [--workloads humaneval_edit,humaneval,chat] [--setups none,ngram-k3]
        [--repeats 3] [--auto-batches full,16,4] [--rows 32] [--stamp S]
    .venv/bin/python jobs/bench.py --sampling [--max-samples 16]  |  --simulate [--max-samples 16] [--repeats 3]

(a)-(i), what each measures and its goals: the docstring of src/specbatch/bench/__init__.py.
One run per measurement on a shared, noisy 2-core machine: quote the ratios of one invocation together.
"""

import argparse
import logging
import sys
import time
from pathlib import Path

from specbatch.bench.auto_bench import DEFAULT_BATCHES, WORKLOADS, AutoPlan, auto_report, batch_list
from specbatch.bench.full_engine import streaming_bench
from specbatch.bench.prediction_bench import PredictPlan, predict_report
from specbatch.bench.sampling_bench import sampling_report
from specbatch.bench.schedule_sweep import SweepPlan, int_list, schedule_report
from specbatch.bench.simulate_bench import simulate_report
from specbatch.bench.speedup import speedup_bench
from specbatch.bench.startup import startup_bench
from specbatch.config import register_configs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-samples", type=int, default=16)
    parser.add_argument("--output-root", type=Path, default=Path(__file__).resolve().parents[1] / "outputs" / "bench")
    parser.add_argument("--skip-overhead", action="store_true")
    parser.add_argument("--streaming", action="store_true", help="run only (c), keeping the engine full")
    parser.add_argument("--rows", type=int, help="(c), (f), (g): rows (default 128 for (c), 64 for (f), all for (g))")
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
    parser.add_argument("--predict-max-tokens", type=int, default=128, help="(f): new tokens per turn")
    parser.add_argument("--stamp", help="(f), (g): an earlier run's stamp: its finished runs are read, not run again")
    parser.add_argument("--auto", action="store_true", help="run only (g), spec=auto against the fixed set-ups")
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help=f"(g): some of {', '.join(WORKLOADS)}")
    parser.add_argument("--setups", help="(g): fixed set-ups, e.g. none,ngram-k3 (default: auto's candidates)")
    parser.add_argument("--auto-max-tokens", type=int, default=128, help="(g): new tokens per row")
    parser.add_argument("--auto-batches", type=batch_list, default=DEFAULT_BATCHES, help="(g): max_num_seqs")
    parser.add_argument("--startup", type=Path, nargs="+", metavar="CHECKOUT", help="run only (e), these checkouts")
    parser.add_argument("--sampling", action="store_true", help="run only (h), n=4 sampling and the lossless check")
    parser.add_argument("--simulate", action="store_true", help="run only (i), spec=simulate against real n-gram")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    register_configs()
    root = args.output_root.resolve()
    root.mkdir(parents=True, exist_ok=True)
    # Fresh run folders per invocation (a finished run is found, not measured again), unless --stamp asks for that.
    stamp = args.stamp or time.strftime("%Y%m%d-%H%M%S")
    if args.startup:
        print(startup_bench([c.resolve() for c in args.startup], args.repeats, root, stamp))
        return 0
    if args.sampling:
        return shown(sampling_report(args.max_samples, 4, root, stamp))
    if args.simulate:
        return shown(simulate_report(args.max_samples, args.repeats, root, stamp))
    if args.auto:
        return shown(auto_report(AutoPlan.from_args(args), root, stamp))
    if args.predict:
        plan = PredictPlan(args.rows or 64, args.two_turn_rows or 32, args.predict_max_tokens)
        return shown(predict_report(plan, root, stamp))
    if args.streaming:
        return shown(streaming_bench(args.rows or 128, args.two_turn_rows or 64, root, stamp, args.report))
    if args.schedule:
        if args.schedule_prompts < max(args.batch_sizes):
            parser.error(f"--schedule-prompts {args.schedule_prompts} cannot fill batch size {max(args.batch_sizes)}")
        plan = SweepPlan(args.batch_sizes, args.ks, args.repeats, args.schedule_prompts, args.schedule_max_tokens)
        schedule_dir = (args.schedule_dir or root / f"schedule-{stamp}").resolve()
        return shown(schedule_report(plan, root, stamp, schedule_dir, args.max_samples, args.skip_overhead))
    print(speedup_bench(args.max_samples, root, stamp, args.skip_overhead))
    return 0


def shown(report_and_path: tuple[str, Path]) -> int:
    print(report_and_path[0])
    logging.getLogger("bench").info("report written to %s", report_and_path[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
