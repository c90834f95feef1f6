"""Benchmark (not a test): the job's overhead over a bare vLLM script, and the embedded default's speedups.

    .venv/bin/python jobs/bench.py [--max-samples 16] [--output-root outputs/bench] [--skip-overhead]
    .venv/bin/python jobs/bench.py --streaming [--rows 128] [--two-turn-rows 64] [--report before.md]
    .venv/bin/python jobs/bench.py --schedule [--batch-sizes 1,4,16,64] [--ks 1,2,3,5,8] [--repeats 3]
        [--schedule-prompts 64] [--schedule-max-tokens 32] [--schedule-dir DIR] [--skip-overhead]
    .venv/bin/python jobs/bench.py --startup CHECKOUT [CHECKOUT ...] [--repeats 3]
    .venv/bin/python jobs/bench.py --predict [--rows 64] [--two-turn-rows 32] [--predict-max-tokens 128] [--stamp S]
    .venv/bin/python jobs/bench.py --auto [--cells helpdesk@16,helpdesk@full,code_edit@16,retrieval@16]
        [--setups none,ngram-k3,suffix-k5] [--sweep-rows 200] [--repeats 2] [--from-round 1] [--rows 1000] [--stamp S]
    .venv/bin/python jobs/bench.py --sampling [--max-samples 16]  |  --simulate [--max-samples 16] [--repeats 3]
    .venv/bin/python jobs/bench.py --verification [--max-samples 16] [--two-turn-rows 16]   (needs a GPU)
    .venv/bin/python jobs/bench.py --ray [--rows 128] [--predict-max-tokens 128] [--repeats 3]
    .venv/bin/python jobs/bench.py --drafter [--rows 48] [--stamp S]   (builds the embedded head first: ~135 min)

(a)-(k), what each measures and its goals: the docstring of src/specbatch/bench/__init__.py.
One run per measurement on a shared, noisy 2-core machine: quote the ratios of one invocation together.
"""

import logging
import sys
import time
from pathlib import Path

from specbatch.bench.arguments import bench_arguments
from specbatch.bench.auto_bench import AutoPlan, auto_report
from specbatch.bench.drafter_bench import DrafterPlan, drafter_report
from specbatch.bench.full_engine import streaming_bench
from specbatch.bench.prediction_bench import PredictPlan, predict_report
from specbatch.bench.ray_bench import ray_report
from specbatch.bench.sampling_bench import sampling_report
from specbatch.bench.schedule_sweep import SweepPlan, schedule_report
from specbatch.bench.simulate_bench import simulate_report
from specbatch.bench.speedup import speedup_bench
from specbatch.bench.startup import startup_bench
from specbatch.bench.verification_bench import verification_report
from specbatch.common.interrupts import EXIT_STOPPED, StopRequested, stop_signals_raise
from specbatch.config import register_configs


def main() -> int:
    parser = bench_arguments(__doc__.splitlines()[0], Path(__file__).resolve().parents[1] / "outputs" / "bench")
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
    if args.verification:
        return shown(verification_report(args.max_samples, args.two_turn_rows or 16, root, stamp))
    if args.ray:
        return shown(ray_report(args.rows or 128, args.predict_max_tokens, args.repeats, root, stamp))
    if args.drafter:
        return shown(drafter_report(DrafterPlan(rows=args.rows or 48), root, stamp))
    if args.auto:
        if not 1 <= args.from_round <= args.repeats:
            parser.error(f"--from-round {args.from_round}: give a round from 1 to --repeats ({args.repeats})")
        return shown(auto_report(AutoPlan.from_args(args), root, stamp))
    if args.predict:
        plan = PredictPlan(args.rows or 64, args.two_turn_rows or 32, args.predict_max_tokens, args.predict_sampling)
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
    # A stop signal raises here, so the job process running is killed and waited for on the way out (subprocess.run
    # does that when interrupted): with Python's default SIGTERM the bench died at once and left its job to finish
    # its rows in flight alone (at the full batch, every row: minutes). A job stopped part way is measured again from
    # its start when --stamp resumes, so nothing of its is lost.
    try:
        with stop_signals_raise("while benchmarking"):
            status = main()
    except StopRequested as stop:
        logging.getLogger("bench").warning("%s: the job running was stopped with it; --stamp resumes the rest", stop)
        status = EXIT_STOPPED
    sys.exit(status)
