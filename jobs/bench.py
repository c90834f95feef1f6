"""Benchmark (not a test): the job's overhead over a bare vLLM script, and the embedded default's speedups.

    .venv/bin/python jobs/bench.py [--max-samples 16] [--output-root outputs/bench] [--skip-overhead]
    .venv/bin/python jobs/bench.py --streaming [--rows 128] [--two-turn-rows 64] [--report before.md]
    .venv/bin/python jobs/bench.py --schedule [--batch-sizes 1,4,16,64] [--ks 1,2,3,5,8] [--repeats 3]
        [--schedule-prompts 64] [--schedule-max-tokens 32] [--schedule-dir DIR] [--skip-overhead]
    .venv/bin/python jobs/bench.py --startup CHECKOUT [CHECKOUT ...] [--repeats 3]

(a) Overhead: ``jobs/generate.py`` (default config: SmolLM2 + ngram k=3, model.dtype=auto, 16 prompts, full batch) and
    ``jobs/bench_bare.py`` (a bare ``vllm.LLM`` script given the exact same ``LLM`` arguments and prompt token ids)
    each run as a fresh process; wall time minus engine start-up, job ÷ bare. Goal: ≤ 1.03. The bare script also
    runs spec=none, so vLLM's own speedup on the same prompts is printed beside the job's.
(b) Speedup: spec=none, ngram and suffix at several k, each measured at batch size 1 (engine.max_num_seqs=1: one
    request at a time) and at full batch (every prompt in the engine at once), greedy, on the default
    code-editing task, through the job's own code (``run_job``); speedup and equality come from jobs/compare's
    analysis of the stored runs. Goals: ≥ 3.0x at batch 1 and ≥ 2.0x at full batch with the best k.
(c) Keeping the engine full (issue 12; ``--streaming`` runs only this): spec=none and ngram, greedy, 256 new
    tokens, on humaneval_edit (128 rows) and on a two-turn HumanEval file written at bench time (64 rows; turn 2
    asks for type hints on the model's own answer). Per method, three fresh processes: the job with chunk_size=8,
    the job with one chunk, and the bare script with every prompt of a turn in one generate call. Output tok/s =
    output tokens ÷ generation seconds (start-up and warm-up excluded), read from the run folder's shard summary.
    Goals: chunk_size=8 ÷ one chunk ≥ 0.97 and job ÷ bare ≥ 0.97. The report is printed and written to a file.
(d) k schedules (issue 15; ``--schedule`` runs (a) and this): ngram at every k and spec=none at every batch size,
    repeated; compare's analysis writes the schedule from the picks; the schedule runs at the same batch sizes and is
    put beside the best fixed k per batch size (goal: within 3 %) and every single k overall (goal: ahead).
    See specbatch.bench.schedule_sweep. ~85 engines: about an hour on 2 cores. Rerun with the same --schedule-dir
    to resume.
(e) Start-up (``--startup``): a four-prompt job from launch to exit with MLflow on, for each checkout given (e.g. a
    clone of main and your branch), in turn; median wall time, the engine's part and the rest. See
    specbatch.bench.startup.

One run per measurement on a shared, noisy 2-core machine: quote the ratios of one invocation together.
"""

import argparse
import logging
import sys
import time
from pathlib import Path

from specbatch.bench.full_engine import streaming_bench
from specbatch.bench.schedule_sweep import SweepPlan, int_list, schedule_report
from specbatch.bench.speedup import speedup_bench
from specbatch.bench.startup import startup_bench
from specbatch.config import register_configs

log = logging.getLogger("bench")
PROJECT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-samples", type=int, default=16)
    parser.add_argument("--output-root", type=Path, default=PROJECT / "outputs" / "bench")
    parser.add_argument("--skip-overhead", action="store_true")
    parser.add_argument("--streaming", action="store_true", help="run only (c), keeping the engine full")
    parser.add_argument("--rows", type=int, default=128, help="(c): humaneval_edit rows")
    parser.add_argument("--two-turn-rows", type=int, default=64, help="(c): rows of the two-turn data set")
    parser.add_argument("--report", type=Path, help="(c): also write the report here (default: in --output-root)")
    parser.add_argument("--schedule", action="store_true", help="run (a) and (d), the k schedule")
    parser.add_argument("--batch-sizes", type=int_list, default=[1, 4, 16, 64], help="(d): e.g. 1,4,16,64")
    parser.add_argument("--ks", type=int_list, default=[1, 2, 3, 5, 8], help="(d): ngram's k, e.g. 1,2,3,5,8")
    parser.add_argument("--repeats", type=int, default=3, help="(d): repeats of every set-up (3 or more)")
    parser.add_argument("--schedule-prompts", type=int, default=64, help="(d): prompts (at least the largest batch)")
    parser.add_argument("--schedule-max-tokens", type=int, default=32, help="(d): new tokens per prompt")
    parser.add_argument("--schedule-dir", type=Path, help="(d): output root of its runs (reuse one to resume)")
    parser.add_argument("--startup", type=Path, nargs="+", metavar="CHECKOUT", help="run only (e), these checkouts")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    register_configs()
    root = args.output_root.resolve()
    root.mkdir(parents=True, exist_ok=True)
    # Fresh run folders per invocation: a finished run would otherwise be found and not measured again.
    stamp = time.strftime("%Y%m%d-%H%M%S")
    if args.startup:
        print(startup_bench([c.resolve() for c in args.startup], args.repeats, root, stamp))
        return 0
    if args.streaming:
        report, path = streaming_bench(args.rows, args.two_turn_rows, root, stamp, args.report)
        print(report)
        log.info("report written to %s", path)
        return 0
    if args.schedule:
        if args.schedule_prompts < max(args.batch_sizes):
            parser.error(f"--schedule-prompts {args.schedule_prompts} cannot fill batch size {max(args.batch_sizes)}")
        plan = SweepPlan(args.batch_sizes, args.ks, args.repeats, args.schedule_prompts, args.schedule_max_tokens)
        schedule_dir = (args.schedule_dir or root / f"schedule-{stamp}").resolve()
        report, path = schedule_report(plan, root, stamp, schedule_dir, args.max_samples, args.skip_overhead)
        print(report)
        log.info("report written to %s", path)
        return 0
    print(speedup_bench(args.max_samples, root, stamp, args.skip_overhead))
    return 0


if __name__ == "__main__":
    sys.exit(main())
