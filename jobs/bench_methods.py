"""Run every speculative method on the same prompts and print AL, tok/s and whether greedy output matched spec=none.

    .venv/bin/python jobs/bench_methods.py [--max-samples 16] [--max-tokens 256] [--output-root outputs/bench]

Real methods (none, ngram, suffix) run on the embedded SmolLM2; the checkpoint methods run on the tiny random
family (no real draft or head exists offline), each against its own spec=none on the same prompts. Float32 and
greedy, so "matched" must be yes everywhere. One engine at a time; one run each, so read ratios, not absolutes.
"""

import argparse
import logging
import sys
import time
from pathlib import Path

from hydra import compose, initialize_config_dir

from specbatch.config import register_configs, to_job_config
from specbatch.run.generate import run_job
from specbatch.run.records import read_rows

log = logging.getLogger("bench_methods")

# (label, model preset, overrides, baseline label)
CASES = [
    ("none", "smollm2_135m", ["spec=none"], None),
    ("ngram k3", "smollm2_135m", ["spec=ngram"], "none"),
    ("ngram k5", "smollm2_135m", ["spec=ngram", "spec.num_speculative_tokens=5"], "none"),
    ("suffix k5", "smollm2_135m", ["spec=suffix"], "none"),
    ("tiny none", "tiny_llama", ["spec=none"], None),
    ("tiny draft_model k3", "tiny_llama", ["spec=draft_model"], "tiny none"),
    (
        "tiny draft=copy k3",
        "tiny_llama",
        ["spec=draft_model", "spec.model=${specbatch_cache:}/tiny/draft_copy"],
        "tiny none",
    ),
    ("tiny eagle k3", "tiny_llama", ["spec=eagle"], "tiny none"),
    ("tiny eagle3 k3", "tiny_llama", ["spec=eagle3"], "tiny none"),
    ("tiny-mimo none", "tiny_mimo", ["spec=none"], None),
    ("tiny-mimo mtp k1", "tiny_mimo", ["spec=mtp"], "tiny-mimo none"),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-samples", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--output-root", default="outputs/bench")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    register_configs()
    # A fresh run folder per invocation: a finished run would otherwise be found and not measured again.
    stamp = time.strftime("%Y%m%d-%H%M%S")
    conf_dir = str(Path(__file__).resolve().parents[1] / "conf")
    results: dict[str, tuple] = {}
    for label, model, extra, _ in CASES:
        overrides = [
            f"model={model}",
            *extra,
            "model.dtype=float32",
            f"max_samples={args.max_samples}",
            f"sampling.max_tokens={args.max_tokens}",
            f"output_root={args.output_root}",
            f"run_name={label.replace(' ', '_').replace('=', '-')}-{stamp}",
            "tracking.experiment=bench_methods",
        ]
        if model != "smollm2_135m":
            overrides.append("dataset=humaneval")  # random models: plain prompts, no chat needed
        with initialize_config_dir(config_dir=conf_dir, version_base="1.3"):
            job = to_job_config(compose(config_name="config", overrides=overrides))
        result = run_job(job)
        rows = {r["row_id"]: r["completion_token_ids"] for r in read_rows(result.parquet_files)}
        results[label] = (result.summary, rows)

    lines = [
        "| run | output tok/s | vs its none | AL | draft acceptance | acceptance per position | matched none |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, _, _, baseline in CASES:
        summary, rows = results[label]
        base_summary, base_rows = results[baseline] if baseline else (summary, rows)
        same = sum(rows[r] == base_rows[r] for r in base_rows)
        al = "-" if summary.mean_acceptance_length is None else f"{summary.mean_acceptance_length:.2f}"
        rate = "-" if summary.draft_acceptance_rate is None else f"{summary.draft_acceptance_rate:.3f}"
        per_pos = " ".join(f"{x:.2f}" for x in summary.acceptance_rate_per_position or []) or "-"
        lines.append(
            f"| {label} | {summary.output_tokens_per_second:.1f} | "
            f"{summary.output_tokens_per_second / base_summary.output_tokens_per_second:.2f} | {al} | {rate} | "
            f"{per_pos} | {'-' if not baseline else f'{same}/{len(base_rows)}'} |"
        )
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
