"""(d) A k schedule, verified: sweep ngram's k at several batch sizes with repeats, let jobs/compare's analysis write
the schedule, run it at the same batch sizes, and put its throughput beside the best fixed k at each batch size and
beside every single k across all of them.

Every run goes through the job's own code (``run_job``, one engine each: the batch is ``engine.max_num_seqs``) on
the same prompts, so compare pools the batch sizes into one workload. Repeats are interleaved (repeat r of every
set-up at a batch size before repeat r+1) so a slow spell of the machine is shared, not pinned on one set-up. The
schedule runs come after the sweep (they need its result); each is compared with the sweep's runs at its batch
size by median tok/s over its repeats. As those are an hour apart on a shared machine, a paired phase follows: at
each batch size the sweep's best fixed set-up and the schedule run back to back, and their ratio is taken pair by
pair (folders ``-rep100`` and up, never pooled with the sweep).

Overall, the four batch sizes count alike: a set-up's overall figure is the geometric mean over batch sizes of its
median tok/s divided by spec=none's median tok/s there (a mean speedup). Total seconds would let the slowest batch
size decide alone.

An interrupted bench resumes when started again with the same ``--schedule-dir``: finished runs are found, not redone.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from specbatch.analysis.compare import CompareRow, Comparison
from specbatch.analysis.k_schedules import KSchedule
from specbatch.analysis.report import Sources, run_compare
from specbatch.analysis.tables import format_comparison
from specbatch.bench import machine_header
from specbatch.bench.overhead import measure_overhead, overhead_lines
from specbatch.config import compose_job
from specbatch.pipeline import run_job

METHOD = "ngram"
# Within this share of the best fixed k at every batch size (the goal).
PER_BATCH_GOAL = 0.97


@dataclass(frozen=True)
class SweepPlan:
    batch_sizes: list[int]
    ks: list[int]
    repeats: int
    prompts: int
    max_tokens: int

    def common(self, root: Path) -> list[str]:
        return [
            f"max_samples={self.prompts}",
            f"sampling.max_tokens={self.max_tokens}",
            "tracking.experiment=bench_schedule",
            f"output_root={root}",
        ]


def _run(overrides: list[str]) -> Path:
    return run_job(compose_job(overrides)).folder.root


def run_sweep(plan: SweepPlan, root: Path) -> list[Path]:
    """spec=none and ngram at every k, at every batch size, ``plan.repeats`` times; the run folders."""
    setups = [["spec=none"]] + [[f"spec={METHOD}", f"spec.num_speculative_tokens={k}"] for k in plan.ks]
    folders = []
    for batch in plan.batch_sizes:
        for repeat in range(plan.repeats):
            for setup in setups:
                overrides = [*plan.common(root), *setup, f"engine.max_num_seqs={batch}", f"repeat={repeat}"]
                folders.append(_run(overrides))
    return folders


def _schedule_overrides(schedule: KSchedule) -> list[str]:
    """The schedule's own overrides without the batch cap: each batch size of the sweep gets its own engine (a
    schedule reaching beyond engine.max_num_seqs is valid: the job only needs 1..max_num_seqs covered)."""
    return [o for o in schedule.overrides() if not o.startswith("engine.max_num_seqs=")]


def run_schedule(plan: SweepPlan, root: Path, schedule: KSchedule) -> list[Path]:
    """The schedule at every batch size of the sweep, ``plan.repeats`` times; the run folders."""
    own = _schedule_overrides(schedule)
    folders = []
    for batch in plan.batch_sizes:
        for repeat in range(plan.repeats):
            overrides = [*plan.common(root), *own, f"engine.max_num_seqs={batch}", f"repeat={repeat}"]
            folders.append(_run(overrides))
    return folders


# Repeat numbers of the paired phase: folders of their own, never pooled with the sweep's repeats.
PAIRED_REPEAT_BASE = 100


def best_fixed(comparison: Comparison, batch_sizes: list[int]) -> dict[int, CompareRow]:
    """Per batch size, the fixed set-up (a k of METHOD, or none) with the highest median tok/s in the sweep."""
    return {
        batch: max(
            (r for r in comparison.rows if r.batch_size == batch and r.k_schedule is None),
            key=_median,
        )
        for batch in batch_sizes
    }


def run_pairs(
    plan: SweepPlan, root: Path, schedule: KSchedule, best: dict[int, CompareRow]
) -> dict[int, list[tuple[float, float]]]:
    """At each batch size, the sweep's best fixed set-up and the schedule back to back, ``plan.repeats`` times; per
    batch size the (fixed, schedule) tok/s of each pair. Measured minutes apart instead of an hour apart, so a
    machine that got slower or faster in between cancels out of their ratio."""
    own = _schedule_overrides(schedule)
    pairs: dict[int, list[tuple[float, float]]] = {}
    for batch in plan.batch_sizes:
        row = best[batch]
        fixed = (
            ["spec=none"] if row.method == "none" else [f"spec={row.method}", f"spec.num_speculative_tokens={row.k}"]
        )
        pairs[batch] = []
        for repeat in range(PAIRED_REPEAT_BASE, PAIRED_REPEAT_BASE + plan.repeats):
            common = [*plan.common(root), f"engine.max_num_seqs={batch}", f"repeat={repeat}"]
            rates = [
                run_job(compose_job([*common, *setup])).summary.output_tokens_per_second for setup in (fixed, own)
            ]
            pairs[batch].append((rates[0], rates[1]))
    return pairs


def pairs_table(
    pairs: dict[int, list[tuple[float, float]]], best: dict[int, CompareRow], comparison: Comparison
) -> tuple[list[str], dict[str, bool]]:
    """The paired verification (Markdown lines) and whether each goal was met."""
    lines = [
        "### paired: the schedule and the best fixed set-up back to back at each batch size",
        "",
        "| batch size | best fixed set-up (sweep) | pairs | fixed tok/s (median) | schedule tok/s (median) | "
        f"schedule ÷ fixed (median of pairs) | goal ≥ {PER_BATCH_GOAL:.2f} |",
        "|---|---|---|---|---|---|---|",
    ]
    ratios: dict[int, float] = {}
    for batch, measured in sorted(pairs.items()):
        ratios[batch] = statistics.median(s / f for f, s in measured)
        lines.append(
            f"| {batch} | {_caption(best[batch])} | {len(measured)} | "
            f"{statistics.median(f for f, _ in measured):.1f} | {statistics.median(s for _, s in measured):.1f} | "
            f"{ratios[batch]:.3f} | {'met' if ratios[batch] >= PER_BATCH_GOAL else 'MISSED'} |"
        )
    # Overall, paired: the best fixed set-up's speedup over none in the sweep, times the paired ratio, per batch size.
    none = {r.batch_size: _median(r) for r in comparison.rows if r.method == "none"}
    schedule_overall = math.exp(
        statistics.fmean(math.log(_median(best[b]) / none[b] * ratios[b]) for b in sorted(pairs))
    )
    fixed_overall: dict[str, float] = {}
    for caption in {_caption(r) for r in comparison.rows if r.k_schedule is None}:
        rows = {r.batch_size: r for r in comparison.rows if _caption(r) == caption and r.k_schedule is None}
        if set(pairs) <= set(rows):
            fixed_overall[caption] = math.exp(statistics.fmean(math.log(_median(rows[b]) / none[b]) for b in pairs))
    best_single = max(fixed_overall, key=lambda c: fixed_overall[c])
    per_batch = all(r >= PER_BATCH_GOAL for r in ratios.values())
    ahead = all(schedule_overall > v for v in fixed_overall.values())
    lines += [
        "",
        f"within {1 - PER_BATCH_GOAL:.0%} of the best fixed set-up at every batch size (paired): "
        f"{'met' if per_batch else 'MISSED'}",
        f"overall (paired estimate: the best fixed set-up's speedup in the sweep × the paired ratio): schedule "
        f"{schedule_overall:.3f}, best single {best_single} {fixed_overall[best_single]:.3f}: "
        f"{'ahead of every single fixed set-up' if ahead else 'NOT ahead of every single fixed set-up'}",
    ]
    return lines, {"per_batch": per_batch, "overall": ahead}


def _median(row: CompareRow) -> float:
    assert row.output_tokens_per_second_median is not None
    return row.output_tokens_per_second_median


def _caption(row: CompareRow) -> str:
    if row.k_schedule is not None:
        return "schedule"
    return "none" if row.method == "none" else f"{row.method} k={row.k}"


def schedule_table(comparison: Comparison, batch_sizes: list[int]) -> tuple[list[str], dict[str, bool]]:
    """The verification tables (Markdown lines) and whether each goal was met."""
    rows = {(r.batch_size, _caption(r)): r for r in comparison.rows}
    captions = sorted({c for _, c in rows}, key=lambda c: (c != "none", c == "schedule", len(c), c))
    lines = [
        "### the schedule against the best fixed k at each batch size (median output tok/s over repeats)",
        "",
        "| batch size | schedule's k here | schedule tok/s | best fixed set-up | its tok/s | schedule ÷ best | goal ≥ "
        f"{PER_BATCH_GOAL:.2f} |",
        "|---|---|---|---|---|---|---|",
    ]
    per_batch_met = True
    ranges = next((r.k_schedule for r in comparison.rows if r.k_schedule is not None), None) or []
    for batch in batch_sizes:
        fixed = [r for (b, c), r in rows.items() if b == batch and c != "schedule"]
        best = max(fixed, key=_median)
        sched = rows.get((batch, "schedule"))
        k_here = next((k for first, last, k in ranges if first <= batch <= last), None)
        if sched is None:
            lines.append(f"| {batch} | {k_here} | - | {_caption(best)} | {_median(best):.1f} | - | not measured |")
            per_batch_met = False
            continue
        ratio = _median(sched) / _median(best)
        met = ratio >= PER_BATCH_GOAL
        per_batch_met &= met
        lines.append(
            f"| {batch} | {k_here} | {_median(sched):.1f} ± {sched.output_tokens_per_second_std:.1f} | "
            f"{_caption(best)} | {_median(best):.1f} ± {best.output_tokens_per_second_std:.1f} | {ratio:.3f} | "
            f"{'met' if met else 'MISSED'} |"
        )
    # Overall: geometric mean over batch sizes of the median tok/s over spec=none's median there.
    overall: dict[str, float] = {}
    for caption in captions:
        ratios = []
        for batch in batch_sizes:
            row, base = rows.get((batch, caption)), rows.get((batch, "none"))
            if row is None or base is None:
                break
            ratios.append(_median(row) / _median(base))
        else:
            overall[caption] = math.exp(statistics.fmean(math.log(r) for r in ratios))
    lines += [
        "",
        "### every set-up across all batch sizes: geometric mean over batch sizes of median tok/s ÷ spec=none's",
        "",
        "| set-up | " + " | ".join(f"bs {b} tok/s" for b in batch_sizes) + " | overall speedup |",
        "|---|" + "---|" * len(batch_sizes) + "---|",
    ]
    for caption in captions:
        cells = [f"{_median(rows[(b, caption)]):.1f}" if (b, caption) in rows else "-" for b in batch_sizes]
        figure = f"{overall[caption]:.3f}" if caption in overall else "-"
        lines.append(f"| {caption} | " + " | ".join(cells) + f" | {figure} |")
    fixed_overall = {c: v for c, v in overall.items() if c != "schedule"}
    ahead = "schedule" in overall and all(overall["schedule"] > v for v in fixed_overall.values())
    best_single = max(fixed_overall, key=lambda c: fixed_overall[c]) if fixed_overall else "-"
    lines += [
        "",
        f"within {1 - PER_BATCH_GOAL:.0%} of the best fixed set-up at every batch size: "
        f"{'met' if per_batch_met else 'MISSED'}",
        f"ahead of every single fixed set-up overall (best single: {best_single} "
        f"{fixed_overall.get(best_single, float('nan')):.3f}; schedule {overall.get('schedule', float('nan')):.3f}): "
        f"{'met' if ahead else 'MISSED'}",
    ]
    return lines, {"per_batch": per_batch_met, "overall": ahead}


def schedule_bench(plan: SweepPlan, root: Path) -> str:
    """Sweep, schedule, verify; the report (Markdown)."""
    began = time.perf_counter()
    sweep = run_sweep(plan, root)
    swept = run_compare(Sources(sweep), out_dir=root / "comparison-sweep", log_to_mlflow=False)
    schedule = next((s for s in swept.comparison.schedules if s.method == METHOD), None)
    lines = [
        f"## (d) k schedule for {METHOD}: k ∈ {plan.ks} at batch sizes {plan.batch_sizes}, {plan.repeats} repeats, "
        f"{plan.prompts} prompts, {plan.max_tokens} new tokens, greedy",
        "",
    ]
    if schedule is None or not schedule.useful:
        lines.append(f"compare wrote no useful {METHOD} schedule (spec=none won everywhere?); nothing to verify")
        lines += ["", format_comparison(swept.comparison)]
        return "\n".join(lines)
    lines += [
        f"picks per batch size (k; 0 = spec=none): {schedule.picks}",
        f"schedule written by compare: {schedule.preset}",
        f"  override: {schedule.override}",
        "",
    ]
    scheduled = run_schedule(plan, root, schedule)
    result = run_compare(Sources(sweep + scheduled), out_dir=root / "comparison")
    table, _ = schedule_table(result.comparison, plan.batch_sizes)
    lines += table
    best = best_fixed(swept.comparison, plan.batch_sizes)
    paired, _ = pairs_table(run_pairs(plan, root, schedule, best), best, swept.comparison)
    lines += ["", *paired]
    lines += [
        "",
        "### the full comparison (speedup: mean tok/s over spec=none's mean; picks use medians)",
        "",
        format_comparison(result.comparison),
        "",
        f"{len(sweep) + len(scheduled) + 2 * len(plan.batch_sizes) * plan.repeats} runs in "
        f"{(time.perf_counter() - began) / 60:.1f} min; "
        f"comparison files and plots: {result.out_dir}",
    ]
    return "\n".join(lines)


def schedule_report(
    plan: SweepPlan, root: Path, stamp: str, schedule_dir: Path, overhead_samples: int, skip_overhead: bool
) -> tuple[str, Path]:
    """``jobs/bench.py --schedule``: (a) the overhead on the default run unless skipped, then (d); the report and
    the file it was written to (``<root>/schedule-report-<stamp>.md``)."""
    lines = [f"# jobs/bench.py --schedule, {time.strftime('%Y-%m-%d %H:%M')}", machine_header(), ""]
    if not skip_overhead:
        common = [f"max_samples={overhead_samples}", "tracking.experiment=bench", f"output_root={root}"]
        lines += overhead_lines(measure_overhead(common, root, stamp))
        print("\n".join(lines), flush=True)  # (d) takes an hour: show (a) now
    lines.append(schedule_bench(plan, schedule_dir))
    report = "\n".join(lines)
    path = root / f"schedule-report-{stamp}.md"
    path.write_text(report + "\n")
    return report, path


def int_list(text: str) -> list[int]:
    """An argparse type: ``1,4,16`` → [1, 4, 16] (sorted, no repeats, each at least 1)."""
    try:
        values = sorted({int(x) for x in text.split(",")})
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected numbers separated by commas, e.g. 1,4,16") from None
    if not values or values[0] < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: every value must be 1 or more")
    return values
