"""Does a spec=auto engine started roomy run its k as fast as an engine started at that k? (issue 67)

    python -m specbatch.bench.roomy_engine [--workload retrieval] [--batch 16] [--k 2] [--room 8] [--rows 160]
        [--max-tokens 64] [--rounds 3] [--output-root outputs/bench/roomy]

spec=auto starts an n-gram engine at the largest k of its candidates with a k schedule at the pilot's own k
(specbatch.auto.engines), so the k can change in place. This runs the same rows, greedy, as three fixed jobs, each a
fresh ``jobs/generate.py`` process, alternating over ``--rounds`` rounds:

- ``plain``: spec=ngram at k ``--k`` (no schedule);
- ``schedule``: a schedule at k ``--k`` at every batch size (vLLM's per-batch-size lookup, no room);
- ``roomy``: that schedule plus k ``--room`` one batch size past the job's batch, as spec=auto starts it.

Each job's engine steps at the cell's full batch (the bucket the batch size falls in) are what is compared: median
over the rounds of seconds per step, beside the steps taken and the whole job's tok/s. Same text and steps are
expected of all three (the k each step runs is the same); a slower step is what starting roomy costs.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

from specbatch.bench import machine_header
from specbatch.bench.processes import run_generate
from specbatch.run.step_log import bucket_label, bucket_of, bucket_totals

log = logging.getLogger(__name__)


def variants(k: int, room: int, batch: int) -> dict[str, list[str]]:
    """The three set-ups (module docstring) as overrides."""
    schedule = f"[1,{batch},{k}]"
    return {
        "plain": ["spec=ngram", f"spec.num_speculative_tokens={k}"],
        "schedule": ["spec=ngram", f"spec.k_schedule=[{schedule}]"],
        "roomy": ["spec=ngram", f"spec.k_schedule=[{schedule},[{batch + 1},{batch + 1},{room}]]"],
    }


def run_rounds(args: argparse.Namespace) -> dict[str, list[dict[str, float]]]:
    """Every round's jobs, alternating the set-ups (their order turned each round); per set-up, each job's figures."""
    setups = variants(args.k, args.room, args.batch)
    figures: dict[str, list[dict[str, float]]] = {name: [] for name in setups}
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for round_ in range(args.rounds):
        order = list(setups) if round_ % 2 == 0 else list(reversed(setups))
        for name in order:
            overrides = [
                f"dataset={args.workload}",
                *setups[name],
                f"engine.max_num_seqs={args.batch}",
                f"max_samples={args.rows}",
                f"sampling.max_tokens={args.max_tokens}",
                "tracking=off",
            ]
            _, shard, wall = run_generate(overrides, args.output_root.resolve(), f"{name}-r{round_}-{stamp}")
            summary = shard.read_summary()
            steps = summary.step_buckets or {}
            # The bucket the job's batch size falls in (``16-31``), as the step log labels it.
            at_batch = next(iter(steps.values()), {}).get(bucket_label(bucket_of(args.batch)), {})
            totals = bucket_totals(steps)
            figures[name].append(
                {
                    "wall": wall,
                    "tok_s": summary.output_tokens / wall,
                    "steps": totals["steps"],
                    "batch_steps": at_batch.get("steps", 0.0),
                    "batch_ms": 1e3 * at_batch.get("seconds", 0.0) / max(at_batch.get("steps", 0.0), 1.0),
                    "tokens": float(summary.output_tokens),
                }
            )
            log.info("round %d %s: %s", round_, name, figures[name][-1])
    return figures


def report(args: argparse.Namespace, figures: dict[str, list[dict[str, float]]]) -> str:
    lines = [
        f"# roomy engine (python -m specbatch.bench.roomy_engine), {time.strftime('%Y-%m-%d %H:%M')}",
        machine_header(),
        f"{args.rows} rows of {args.workload}, {args.max_tokens} new tokens, batch {args.batch}, n-gram k {args.k} "
        f"(roomy: started at k {args.room}); {args.rounds} rounds, alternating",
        "",
        "| set-up | ms/step at full batch, per round | median | vs plain | steps (at full batch) | tokens "
        "| job tok/s |",
        "|---|---|---|---|---|---|---|",
    ]
    plain = statistics.median(f["batch_ms"] for f in figures["plain"])
    for name, runs in figures.items():
        median = statistics.median(f["batch_ms"] for f in runs)
        per_round = ", ".join(f"{f['batch_ms']:.1f}" for f in runs)
        steps = sorted({f"{f['steps']:.0f} ({f['batch_steps']:.0f})" for f in runs})
        tokens = sorted({f"{f['tokens']:.0f}" for f in runs})
        rate = statistics.median(f["tok_s"] for f in runs)
        lines.append(
            f"| {name} | {per_round} | {median:.1f} | {median / plain:.3f} | {', '.join(steps)} | "
            f"{', '.join(tokens)} | {rate:.1f} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="retrieval", help="the dataset config group's option")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--k", type=int, default=2, help="the k every step runs")
    parser.add_argument("--room", type=int, default=8, help="the k the roomy engine is started at")
    parser.add_argument("--rows", type=int, default=160)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output-root", type=Path, default=Path("outputs") / "bench" / "roomy")
    args = parser.parse_args()
    if not 0 < args.k < args.room:
        parser.error(f"--k {args.k} must be at least 1 and below --room {args.room}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    sys.stdout.write(report(args, run_rounds(args)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
