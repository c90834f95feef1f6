"""Every speculative method on the same prompts (jobs/bench_methods.py): AL, tok/s and whether greedy output matched
spec=none. Real methods on the embedded SmolLM2, checkpoint methods on the tiny random family, each against its own
spec=none; float32 and greedy, so "matched" must be yes everywhere."""

from __future__ import annotations

import time

from specbatch.bench import machine_header
from specbatch.config import compose_job
from specbatch.pipeline import run_job
from specbatch.run.records.output_parts import read_rows
from specbatch.run.summary import Summary

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
# A case's summary and its completions' token ids by row id.
Measured = tuple[Summary, dict[str, list[int]]]


def run_methods(max_samples: int, max_tokens: int, output_root: str) -> dict[str, Measured]:
    """Each case's run, one engine at a time: its summary and its completions' token ids by row id."""
    # A fresh run folder per invocation: a finished run would otherwise be found and not measured again.
    stamp = time.strftime("%Y%m%d-%H%M%S")
    results: dict[str, Measured] = {}
    for label, model, extra, _ in CASES:
        overrides = [
            f"model={model}",
            *extra,
            "model.dtype=float32",
            f"max_samples={max_samples}",
            f"sampling.max_tokens={max_tokens}",
            f"output_root={output_root}",
            f"run_name={label.replace(' ', '_').replace('=', '-')}-{stamp}",
            "tracking.experiment=bench_methods",
        ]
        if model != "smollm2_135m":
            overrides.append("dataset=humaneval")  # random models: plain prompts, no chat needed
        result = run_job(compose_job(overrides))
        rows = {r["row_id"]: r["completion_token_ids"] for r in read_rows(result.parquet_files)}
        results[label] = (result.summary, rows)
    return results


def methods_table(results: dict[str, Measured]) -> str:
    """Each case against its own spec=none, as a Markdown table."""
    lines = [
        machine_header(),
        "",
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
    return "\n".join(lines)
