"""A comparison as text and files: the Markdown table with its recommendations, and comparison.csv/.json/.parquet."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from specbatch.analysis.compare import Comparison
from specbatch.analysis.distribution import ALPHA, MAX_DETECTABLE_TV, POWER, PREFIX_LENGTHS
from specbatch.analysis.lossless.verdicts import lossless_table
from specbatch.common.atomic_files import atomic_write, atomic_write_json, atomic_write_text
from specbatch.config import spec_caption


def format_comparison(comparison: Comparison) -> str:
    """The comparison as a Markdown table (readable in a terminal, pasteable into notes)."""

    def num(value: float | None, digits: int = 2) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    header = (
        "| model | dataset | dtype | batch | method | k | repeats | output tok/s (mean ± std) | speedup [min–max] "
        "| median speedup (spread) | AL | acceptance | per position | identical rows | first differences |"
    )
    lines = [header, "|" + "---|" * header.count(" | ") + "---|"]
    for r in comparison.rows:
        speedup = "-" if r.speedup is None else f"{r.speedup:.2f} [{num(r.speedup_min)}–{num(r.speedup_max)}]"
        median = "-" if r.speedup_median is None else f"{r.speedup_median:.2f} ({num(r.speedup_spread)})"
        per_pos = " ".join(f"{x:.2f}" for x in r.acceptance_rate_per_position or []) or "-"
        same = f"{r.identical_rows}/{r.rows_compared}" if r.rows_compared else "-"
        k = f"schedule {' '.join(f'{a}-{b}:{c}' for a, b, c in r.k_schedule)}" if r.k_schedule else r.k or "-"
        diffs = ", ".join(r.first_differences[:3]) + (" …" if len(r.first_differences) > 3 else "")
        method = r.caption if r.chose else f"{r.method} ({r.variant})" if r.variant else r.method
        lines.append(
            f"| {r.model} | {r.dataset} | {r.dtype} | {r.batch_size} | {method} | {k} | "
            f"{r.repeats} | {r.output_tokens_per_second:.1f} ± {r.output_tokens_per_second_std:.1f} | {speedup} | "
            f"{median} | "
            f"{num(r.mean_acceptance_length)} | {num(r.draft_acceptance_rate, 3)} | {per_pos} | {same} | "
            f"{diffs or '-'} |"
        )
    lines.append("")
    for rec in comparison.recommendations:
        best_k = ", ".join(spec_caption(m, k) for m, k in rec.best_k_per_method.items())
        chosen = f"spec={spec_caption(rec.method, rec.k)}"
        lines.append(
            f"recommended at batch size {rec.batch_size} ({rec.model}, {rec.dataset}, {rec.dtype}): {chosen} — "
            f"{rec.reason}; best k per method: {best_k}"
        )
    for schedule in comparison.schedules:
        picks = ", ".join(f"{size}→{k}" for size, k in schedule.picks.items())
        where = f"{schedule.model}, {schedule.dataset}, {schedule.dtype}"
        if not schedule.useful:
            lines.append(f"k schedule for {schedule.method} ({where}): none — spec=none wins at every batch size")
            continue
        lines.append(
            f"k schedule for {schedule.method} ({where}; k per batch size {picks}"
            + ("" if schedule.enough_repeats else "; provisional: too few repeats")
            + f"): {schedule.override}"
        )
        lines.append(f"  run it: {schedule.command()}")
        if schedule.preset:
            lines.append(f"  or its preset: {schedule.preset_command()}")
    lines += cross_engine_table(comparison)
    lines += predicted_table(comparison)
    lines += distribution_table(comparison)
    lines += lossless_table(comparison.lossless)
    for c in comparison.baseline_consistency:
        lines.append(
            f"baseline vs itself ({c.dtype}), batch size {c.batch_sizes[0]} vs {c.batch_sizes[1]}: "
            f"{c.identical_rows}/{c.rows_compared} rows identical"
        )
    lines += [f"note: {n}" for n in comparison.notes]
    return "\n".join(lines)


def distribution_table(comparison: Comparison) -> list[str]:
    """Each sampled speculative run against its baseline: the two-sample test of analysis/distribution.py."""
    if not comparison.distribution:
        return []
    lengths = list(comparison.distribution[0].result.p_values) or [str(m) for m in PREFIX_LENGTHS]
    lines = [
        "",
        f"distribution under sampling, against spec=none ({comparison.distribution[0].result.test}; "
        f"differs when p < {ALPHA}, too few samples to tell when the shift it detects with power {POWER} is above "
        f"{MAX_DETECTABLE_TV} in total variation):",
        "| batch | method | k | temperature | prompts | samples per prompt (run / none) | "
        + " | ".join(f"p, first {m}" for m in lengths)
        + " | p | detectable TV | verdict |",
        "|---|---|---|---|---|---|" + "---|" * len(lengths) + "---|---|---|",
    ]
    for check in comparison.distribution:
        test = check.result
        ps = " | ".join(f"{test.p_values[m]:.2g}" if m in test.p_values else "-" for m in lengths)
        p = "-" if test.p_value is None else f"{test.p_value:.2g}"
        tv = "-" if test.detectable_tv is None else f"{test.detectable_tv:.3f}"
        lines.append(
            f"| {check.batch_size} | {check.method} | {check.k or '-'} | {check.temperature} | {test.prompts} | "
            f"{test.samples:g} / {test.baseline_samples:g} | {ps} | {p} | {tv} | {test.verdict} |"
        )
    return lines


def predicted_table(comparison: Comparison) -> list[str]:
    """Each measured n-gram and suffix set-up beside what replay predicted for it (analysis/predicted.py)."""
    if not comparison.predicted:
        return []

    def num(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    lines = [
        "",
        "predicted by replaying each set-up on its baseline's tokens (jobs/predict.py), beside measured:",
        "| dataset | batch | method | k | AL | AL predicted | speedup | speedup predicted | measured ÷ predicted "
        "| pass cost (decode steps, d draft tokens per pass) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in comparison.predicted:
        ratio = p.speedup / p.predicted_speedup if p.speedup and p.predicted_speedup else None
        lines.append(
            f"| {p.dataset} | {p.batch_size} | {p.method} | {p.k} | {num(p.acceptance_length)} "
            f"| {num(p.predicted_acceptance_length)} | {num(p.speedup)} | {num(p.predicted_speedup)} | {num(ratio)} "
            f"| {p.pass_cost} |"
        )
    return lines


def cross_engine_table(comparison: Comparison) -> list[str]:
    """Engines side by side on the same prompts (same model, data set and sampling): tok/s, speedup over each
    engine's own baseline, AL where the engine reports its steps, tokens per target pass and acceptance. Nothing
    when the runs are all on one engine."""
    rows = comparison.rows
    keys = {r.prompts_key for r in rows if len({s.engine for s in rows if s.prompts_key == r.prompts_key}) > 1}
    if not keys:
        return []

    def num(value: float | None, digits: int = 2) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    header = (
        "| model | dataset | batch | method | k | engine | weights | output tok/s | speedup over its own none | AL "
        "| tokens per target pass | acceptance |"
    )
    lines = ["", "engines side by side on the same prompts:", header, "|" + "---|" * header.count(" | ") + "---|"]
    chosen = sorted(
        (r for r in rows if r.prompts_key in keys and r.k_schedule is None),
        key=lambda r: (r.prompts_key, r.batch_size, r.method != "none", r.method, r.k or 0, r.engine),
    )
    for r in chosen:
        lines.append(
            f"| {r.model} | {r.dataset} | {r.batch_size} | {r.method} | {r.k or '-'} | {r.engine} | {r.dtype} | "
            f"{r.output_tokens_per_second:.1f} | {num(r.speedup)} | {num(r.mean_acceptance_length)} | "
            f"{num(r.tokens_per_pass)} | {num(r.draft_acceptance_rate, 3)} |"
        )
    lines.append(
        "AL needs the engine's drafting steps, which llama.cpp does not report; tokens per target pass, "
        "output / (output - accepted), is every engine's"
    )
    return lines


def flat_rows(comparison: Comparison) -> list[dict[str, Any]]:
    """Rows for CSV: lists joined with spaces (Parquet keeps them as lists)."""
    out = []
    for row in comparison.rows:
        flat = asdict(row)
        for key in ("acceptance_rate_per_position", "first_differences", "run_folders"):
            value = flat[key]
            flat[key] = "" if value is None else " ".join(str(v) for v in value)
        # "1-4:5 5-256:0" (batch sizes first-last: k), empty for a fixed k.
        flat["k_schedule"] = " ".join(f"{a}-{b}:{c}" for a, b, c in row.k_schedule or [])
        out.append(flat)
    return out


def write_comparison(comparison: Comparison, out_dir: Path) -> list[Path]:
    """comparison.csv, .json and .parquet in ``out_dir``, each written atomically; returns their paths."""
    import csv
    import io

    import pyarrow as pa

    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path, json_path, parquet_path = (out_dir / f"comparison.{ext}" for ext in ("csv", "json", "parquet"))
    flat = flat_rows(comparison)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(flat[0]) if flat else ["model"])
    writer.writeheader()
    writer.writerows(flat)
    atomic_write_text(csv_path, buffer.getvalue())
    atomic_write_json(json_path, comparison.to_dict())
    table = pa.Table.from_pylist([asdict(r) for r in comparison.rows])
    atomic_write(parquet_path, lambda tmp: pq.write_table(table, tmp))
    return [csv_path, json_path, parquet_path]
