"""PNG plots of a comparison (matplotlib, headless): acceptance by position, speedup vs k, tok/s vs batch size."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from specbatch.analysis.compare import CompareRow, Comparison
from specbatch.common.png import pyplot, save_png


def _label(row: CompareRow) -> str:
    return row.caption


def plot_acceptance_by_position(comparison: Comparison, path: Path) -> Path:
    """One line per method and k (at the largest batch size measured): acceptance rate at each draft position."""
    plt = pyplot()
    spec = [r for r in comparison.rows if r.acceptance_rate_per_position]
    largest = max((r.batch_size for r in spec), default=0)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for row in (r for r in spec if r.batch_size == largest):
        rates = row.acceptance_rate_per_position or []
        ax.plot(range(1, len(rates) + 1), rates, marker="o", label=_label(row))
    ax.set(xlabel="draft position", ylabel="acceptance rate", ylim=(0, 1.05), title=f"batch size {largest}")
    ax.grid(alpha=0.3)
    if spec:
        ax.legend(fontsize="small")
    return save_png(fig, plt, path)


def draw_speedup_vs_k(comparison: Comparison) -> tuple[Any, Any]:
    """Speedup over spec=none against k, one line per method and batch size, with the repeats' min–max as bars;
    the speedup axis starts at 0, so a 5 % difference looks like 5 %. Returns (figure, axes)."""
    plt = pyplot()
    lines: dict[tuple[str, int], list[CompareRow]] = defaultdict(list)
    for row in comparison.rows:
        # A k schedule has no single k to plot against (its runs show in throughput_vs_batch_size.png).
        if row.method != "none" and row.k is not None and row.speedup is not None and row.k_schedule is None:
            # A variant (block verification, probabilistic drafts) is a line of its own.
            method = f"{row.method} ({row.variant})" if row.variant else row.method
            lines[(method, row.batch_size)].append(row)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (method, batch), rows in sorted(lines.items()):
        rows.sort(key=lambda r: r.k or 0)
        ks = [r.k for r in rows]
        mean = [r.speedup or 0.0 for r in rows]
        low = [m - (r.speedup_min or m) for r, m in zip(rows, mean, strict=True)]
        high = [(r.speedup_max or m) - m for r, m in zip(rows, mean, strict=True)]
        ax.errorbar(ks, mean, yerr=[low, high], marker="o", capsize=3, label=f"{method}, batch {batch}")
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="spec=none")
    ax.set(xlabel="k (speculative tokens)", ylabel="speedup over spec=none")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return fig, ax


def plot_speedup_vs_k(comparison: Comparison, path: Path) -> Path:
    fig, _ = draw_speedup_vs_k(comparison)
    return save_png(fig, pyplot(), path)


def draw_throughput_vs_batch(comparison: Comparison) -> tuple[Any, Any]:
    """Output tok/s against batch size for the baseline and for the best speculative set-up at each size; with one
    batch size, one bar per set-up instead (two points on a line say nothing). The tok/s axis starts at 0.
    Returns (figure, axes)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    sizes = sorted({r.batch_size for r in comparison.rows})
    if len(sizes) == 1:
        rows = comparison.rows
        ax.bar(range(len(rows)), [r.output_tokens_per_second for r in rows], color="tab:blue")
        ax.errorbar(
            range(len(rows)),
            [r.output_tokens_per_second for r in rows],
            yerr=[
                [r.output_tokens_per_second - r.output_tokens_per_second_min for r in rows],
                [r.output_tokens_per_second_max - r.output_tokens_per_second for r in rows],
            ],
            fmt="none",
            ecolor="black",
            capsize=3,
        )
        ax.set_xticks(range(len(rows)), [_label(r) for r in rows], rotation=30, ha="right", fontsize="small")
        ax.set(ylabel="output tokens / s", title=f"batch size {sizes[0]} (mean, repeats' min–max)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3, axis="y")
        return fig, ax
    baseline = sorted((r.batch_size, r.output_tokens_per_second) for r in comparison.rows if r.method == "none")
    best: dict[int, CompareRow] = {}
    for row in comparison.rows:
        if row.method != "none":
            current = best.get(row.batch_size)
            if current is None or row.output_tokens_per_second > current.output_tokens_per_second:
                best[row.batch_size] = row
    if baseline:
        ax.plot(*zip(*baseline, strict=True), marker="o", label="spec=none")
    if best:
        measured = sorted(best)
        ax.plot(measured, [best[b].output_tokens_per_second for b in measured], marker="s", label="best speculative")
        for b in measured:
            ax.annotate(_label(best[b]), (b, best[b].output_tokens_per_second), fontsize="x-small")
    ax.set(xlabel="batch size (prompts per engine step)", ylabel="output tokens / s")
    ax.set_xscale("log", base=2)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return fig, ax


def plot_throughput_vs_batch(comparison: Comparison, path: Path) -> Path:
    fig, _ = draw_throughput_vs_batch(comparison)
    return save_png(fig, pyplot(), path)


def plot_all(comparison: Comparison, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    return [
        plot_acceptance_by_position(comparison, out_dir / "acceptance_by_position.png"),
        plot_speedup_vs_k(comparison, out_dir / "speedup_vs_k.png"),
        plot_throughput_vs_batch(comparison, out_dir / "throughput_vs_batch_size.png"),
    ]
