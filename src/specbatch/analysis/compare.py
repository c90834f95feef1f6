"""Is speculation worth it here, and with which k? Speedup over spec=none, acceptance and greedy equality.

Runs are matched to a baseline (``spec=none``) that generated the same prompts with the same model, dtype, sampling
and engine at the same batch size: everything in the run's config except the speculative method, the repeat number
and where things are written. Throughput comes from the stored timings (generation seconds of the streaming loop,
engine start excluded); repeats of one set-up give a mean and a spread. Equality is checked row by row against the
baseline's token ids: in float32 greedy decoding speculation must reproduce them exactly; in bfloat16 near-tied
logits flip with the shape of the computation, so the report also says how often the baseline differs from itself
across batch sizes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from specbatch.run.folder import read_run, shard_folders
from specbatch.run.records import STATUS_OK
from specbatch.run.summary import Summary, merge_summaries

log = logging.getLogger(__name__)

# Config sections that do not change what is generated or how fast it is measured.
_NOT_WORKLOAD = ("spec", "tracking", "output_root", "run_name", "shard", "repeat", "chunk_size")
# Rows listed with their first differing token, per compared run (the rest are only counted).
MAX_LISTED_DIFFERENCES = 20

RowKey = tuple[str, int, int]


class CompareError(ValueError):
    """The runs given cannot be compared (no baseline, unfinished runs, nothing found); says what to run."""


@dataclass
class RunData:
    """One finished run: its config, its summary over all shards, and its completions' token ids."""

    root: Path
    config: dict[str, Any]
    summary: Summary
    tokens: dict[RowKey, list[int]]
    prompts: int

    @property
    def method(self) -> str:
        return self.summary.method

    @property
    def k(self) -> int | None:
        return self.summary.num_speculative_tokens

    @property
    def repeat(self) -> int:
        return int(self.config.get("repeat", 0))

    @property
    def batch_size(self) -> int:
        """Requests the engine ran at once: its concurrency (engine.max_num_seqs or the engine's default), or fewer
        when the run had fewer prompts. Runs written before the engine was streamed ran one chunk per generate
        call, so their batch was also capped by chunk_size."""
        sizes = [self.prompts]
        if self.summary.concurrency:
            sizes.append(self.summary.concurrency)
        else:
            sizes.append(self.config["chunk_size"])
            if self.config["engine"].get("max_num_seqs"):
                sizes.append(self.config["engine"]["max_num_seqs"])
        return max(1, min(sizes))

    @property
    def dtype(self) -> str:
        return str(self.config["model"]["dtype"])

    @property
    def workload(self) -> str:
        """What must match for two runs to be compared: same prompts, model, dtype, sampling and engine."""
        plain = {k: v for k, v in self.config.items() if k not in _NOT_WORKLOAD}
        plain["engine"] = {k: v for k, v in plain["engine"].items() if k != "max_num_seqs"}
        # Runs written before engine.backend existed ran on vLLM: they compare with the runs written since.
        plain["engine"].setdefault("backend", "vllm")
        return hashlib.sha256(json.dumps(plain, sort_keys=True).encode()).hexdigest()[:8]


def load_run(root: Path) -> RunData:
    from specbatch.run.runs import finished_summary

    root = Path(root).resolve()
    config = read_run(root)["config"]
    summary = finished_summary(root)
    tokens: dict[RowKey, list[int]] = {}
    first_turn_rows: set[str] = set()
    columns = ["row_id", "turn", "sample_index", "status", "completion_token_ids"]
    for folder in shard_folders(root):
        for part in folder.parts():
            for row in pq.read_table(part, columns=columns).to_pylist():
                if row["turn"] == 1:
                    first_turn_rows.add(row["row_id"])
                if row["status"] == STATUS_OK:
                    tokens[(row["row_id"], row["turn"], row["sample_index"])] = row["completion_token_ids"]
    return RunData(root, config, summary, tokens, prompts=len(first_turn_rows))


@dataclass(frozen=True)
class Equality:
    """Row-by-row greedy equality of a run with its reference."""

    rows_compared: int
    identical: int
    # "row_id[/turn t][#sample]@token i" for the first differing rows (at most MAX_LISTED_DIFFERENCES).
    first_differences: list[str]

    @property
    def share(self) -> float | None:
        return self.identical / self.rows_compared if self.rows_compared else None


def first_difference(a: list[int], b: list[int]) -> int | None:
    """Index of the first token where two completions differ (the shorter length if one is a prefix); None if equal."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def equality(run: dict[RowKey, list[int]], reference: dict[RowKey, list[int]]) -> Equality:
    common = sorted(run.keys() & reference.keys())
    listed: list[str] = []
    identical = 0
    for key in common:
        at = first_difference(run[key], reference[key])
        if at is None:
            identical += 1
        elif len(listed) < MAX_LISTED_DIFFERENCES:
            row_id, turn, sample = key
            label = row_id + (f"/turn {turn}" if turn != 1 else "") + (f"#{sample}" if sample else "")
            listed.append(f"{label}@token {at}")
    return Equality(len(common), identical, listed)


@dataclass
class CompareRow:
    """One set-up (method and k at one batch size), over its repeats, against its baseline."""

    model: str
    dataset: str
    dtype: str
    workload: str
    batch_size: int
    method: str
    k: int | None
    repeats: int
    output_tokens_per_second: float
    output_tokens_per_second_std: float
    output_tokens_per_second_min: float
    output_tokens_per_second_max: float
    # Mean tok/s over the baseline's mean tok/s; min/max pair each repeat with the baseline mean.
    speedup: float | None
    speedup_min: float | None
    speedup_max: float | None
    mean_acceptance_length: float | None
    draft_acceptance_rate: float | None
    acceptance_rate_per_position: list[float] | None
    # Against the baseline's first repeat (for the baseline itself: its other repeats against the first).
    rows_compared: int
    identical_rows: int
    identical_share: float | None
    first_differences: list[str]
    run_folders: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Recommendation:
    model: str
    dataset: str
    dtype: str
    batch_size: int
    method: str
    k: int | None
    speedup: float
    # The best k of each method at this batch size, e.g. {"ngram": 3, "suffix": 5}.
    best_k_per_method: dict[str, int]
    reason: str


@dataclass(frozen=True)
class BaselineConsistency:
    """The baseline against itself at two batch sizes: differences here come from numerics, not speculation."""

    model: str
    dataset: str
    dtype: str
    batch_sizes: tuple[int, int]
    rows_compared: int
    identical_rows: int
    identical_share: float | None


@dataclass
class Comparison:
    rows: list[CompareRow]
    recommendations: list[Recommendation]
    baseline_consistency: list[BaselineConsistency]
    notes: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows": [asdict(r) for r in self.rows],
            "recommendations": [asdict(r) for r in self.recommendations],
            "baseline_consistency": [asdict(b) for b in self.baseline_consistency],
            "notes": self.notes,
        }


def _mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def compare(runs: Iterable[RunData]) -> Comparison:
    """Group runs by set-up, match each to its baseline, and recommend a k per batch size."""
    groups: dict[tuple[str, int, str, int | None], list[RunData]] = defaultdict(list)
    for run in runs:
        groups[(run.workload, run.batch_size, run.method, run.k)].append(run)
    if not groups:
        raise CompareError("no runs to compare: pass run folders, a sweep folder or --mlflow-run <parent run id>")
    for members in groups.values():
        members.sort(key=lambda r: (r.repeat, str(r.root)))
    baselines = {(w, b): members for (w, b, method, _), members in groups.items() if method == "none"}
    if not baselines:
        raise CompareError(
            "none of the runs is a spec=none baseline, so there is nothing to measure speedup against: "
            "add spec=none to the sweep (e.g. -m spec=none,ngram,suffix) with the same model, data set and batch size"
        )
    rows, notes = [], []
    for (workload, batch, _, _), members in sorted(groups.items(), key=_group_order):
        base = baselines.get((workload, batch))
        if base is None:
            notes.append(
                f"{members[0].root}: no spec=none run with the same prompts, model, dtype, sampling and engine at "
                f"batch size {batch}; its speedup is not computed (run spec=none with the same settings)"
            )
        rows.append(_row(members, base))
    consistency = _baseline_consistency(baselines)
    dtypes = sorted({r.dtype for r in rows})
    notes.append(f"greedy equality compared in {', '.join(dtypes)}")
    if any(d != "float32" for d in dtypes):
        notes.append(
            "in bfloat16 near-tied logits can flip with the batch shape even without speculation: read identical "
            "rows below 1.0 against the baseline-consistency figures, not as a bug by itself"
        )
    return Comparison(rows, _recommend(rows), consistency, notes)


def _group_order(item: tuple[tuple[str, int, str, int | None], list[RunData]]) -> tuple[Any, ...]:
    (workload, batch, method, k), _ = item
    return (workload, batch, method != "none", method, k or 0)


def _row(members: list[RunData], base: list[RunData] | None) -> CompareRow:
    first = members[0]
    rates = [m.summary.output_tokens_per_second for m in members]
    mean, std = _mean_std(rates)
    speedups: list[float] = []
    base_mean = None
    if base is not None:
        base_mean = statistics.fmean(b.summary.output_tokens_per_second for b in base)
        speedups = [r / base_mean for r in rates] if base_mean > 0 else []
    # Acceptance from the repeats' summed counts (exact), not an average of averages.
    pooled = merge_summaries([m.summary for m in members])
    if first.method == "none":
        # The baseline against its own first repeat: shows run-to-run determinism when there are repeats.
        checks = [equality(m.tokens, members[0].tokens) for m in members[1:]]
    else:
        checks = [equality(m.tokens, base[0].tokens) for m in members] if base else []
    compared = sum(c.rows_compared for c in checks)
    identical = sum(c.identical for c in checks)
    return CompareRow(
        model=first.config["model"]["name"],
        dataset=first.config["dataset"]["name"],
        dtype=first.dtype,
        workload=first.workload,
        batch_size=first.batch_size,
        method=first.method,
        k=first.k,
        repeats=len(members),
        output_tokens_per_second=mean,
        output_tokens_per_second_std=std,
        output_tokens_per_second_min=min(rates),
        output_tokens_per_second_max=max(rates),
        speedup=mean / base_mean if base_mean else None,
        speedup_min=min(speedups) if speedups else None,
        speedup_max=max(speedups) if speedups else None,
        mean_acceptance_length=pooled.mean_acceptance_length,
        draft_acceptance_rate=pooled.draft_acceptance_rate,
        acceptance_rate_per_position=pooled.acceptance_rate_per_position,
        rows_compared=compared,
        identical_rows=identical,
        identical_share=identical / compared if compared else None,
        first_differences=[d for c in checks for d in c.first_differences][:MAX_LISTED_DIFFERENCES],
        run_folders=[str(m.root) for m in members],
    )


def _recommend(rows: list[CompareRow]) -> list[Recommendation]:
    by_batch: dict[tuple[str, int], list[CompareRow]] = defaultdict(list)
    for row in rows:
        if row.method != "none" and row.speedup is not None:
            by_batch[(row.workload, row.batch_size)].append(row)
    out = []
    for (_, batch), candidates in sorted(by_batch.items(), key=lambda kv: kv[0]):
        best_per_method: dict[str, CompareRow] = {}
        for row in candidates:
            current = best_per_method.get(row.method)
            if current is None or (row.speedup or 0) > (current.speedup or 0):
                best_per_method[row.method] = row
        best = max(candidates, key=lambda r: r.speedup or 0.0)
        assert best.speedup is not None
        best_k = {m: r.k for m, r in sorted(best_per_method.items()) if r.k is not None}
        if best.speedup > 1.0:
            method, k, reason = best.method, best.k, f"fastest measured: {best.speedup:.2f}x the baseline"
        else:
            method, k = "none", None
            reason = f"no speculative set-up beat the baseline (best: {best.method} k={best.k}, {best.speedup:.2f}x)"
        out.append(
            Recommendation(
                model=best.model,
                dataset=best.dataset,
                dtype=best.dtype,
                batch_size=batch,
                method=method,
                k=k,
                speedup=best.speedup if method != "none" else 1.0,
                best_k_per_method=best_k,
                reason=reason,
            )
        )
    return out


def _baseline_consistency(baselines: dict[tuple[str, int], list[RunData]]) -> list[BaselineConsistency]:
    by_workload: dict[str, list[tuple[int, RunData]]] = defaultdict(list)
    for (workload, batch), members in baselines.items():
        by_workload[workload].append((batch, members[0]))
    out = []
    for pairs in by_workload.values():
        pairs.sort(key=lambda p: p[0])
        for i, (batch_a, run_a) in enumerate(pairs):
            for batch_b, run_b in pairs[i + 1 :]:
                check = equality(run_b.tokens, run_a.tokens)
                out.append(
                    BaselineConsistency(
                        model=run_a.config["model"]["name"],
                        dataset=run_a.config["dataset"]["name"],
                        dtype=run_a.dtype,
                        batch_sizes=(batch_a, batch_b),
                        rows_compared=check.rows_compared,
                        identical_rows=check.identical,
                        identical_share=check.share,
                    )
                )
    return out


def format_comparison(comparison: Comparison) -> str:
    """The comparison as a Markdown table (readable in a terminal, pasteable into notes)."""

    def num(value: float | None, digits: int = 2) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    header = (
        "| model | dataset | dtype | batch | method | k | repeats | output tok/s (mean ± std) | speedup [min–max] "
        "| AL | acceptance | per position | identical rows | first differences |"
    )
    lines = [header, "|" + "---|" * header.count(" | ") + "---|"]
    for r in comparison.rows:
        speedup = "-" if r.speedup is None else f"{r.speedup:.2f} [{num(r.speedup_min)}–{num(r.speedup_max)}]"
        per_pos = " ".join(f"{x:.2f}" for x in r.acceptance_rate_per_position or []) or "-"
        same = f"{r.identical_rows}/{r.rows_compared}" if r.rows_compared else "-"
        diffs = ", ".join(r.first_differences[:3]) + (" …" if len(r.first_differences) > 3 else "")
        lines.append(
            f"| {r.model} | {r.dataset} | {r.dtype} | {r.batch_size} | {r.method} | {r.k if r.k else '-'} | "
            f"{r.repeats} | {r.output_tokens_per_second:.1f} ± {r.output_tokens_per_second_std:.1f} | {speedup} | "
            f"{num(r.mean_acceptance_length)} | {num(r.draft_acceptance_rate, 3)} | {per_pos} | {same} | "
            f"{diffs or '-'} |"
        )
    lines.append("")
    for rec in comparison.recommendations:
        best_k = ", ".join(f"{m} k={k}" for m, k in rec.best_k_per_method.items())
        chosen = "spec=none" if rec.method == "none" else f"spec={rec.method} k={rec.k}"
        lines.append(
            f"recommended at batch size {rec.batch_size} ({rec.model}, {rec.dataset}, {rec.dtype}): {chosen} — "
            f"{rec.reason}; best k per method: {best_k}"
        )
    for c in comparison.baseline_consistency:
        lines.append(
            f"baseline vs itself ({c.dtype}), batch size {c.batch_sizes[0]} vs {c.batch_sizes[1]}: "
            f"{c.identical_rows}/{c.rows_compared} rows identical"
        )
    lines += [f"note: {n}" for n in comparison.notes]
    return "\n".join(lines)


def flat_rows(comparison: Comparison) -> list[dict[str, Any]]:
    """Rows for CSV: lists joined with spaces (Parquet keeps them as lists)."""
    out = []
    for row in comparison.rows:
        flat = asdict(row)
        for key in ("acceptance_rate_per_position", "first_differences", "run_folders"):
            value = flat[key]
            flat[key] = "" if value is None else " ".join(str(v) for v in value)
        out.append(flat)
    return out


def write_comparison(comparison: Comparison, out_dir: Path) -> list[Path]:
    """comparison.csv, .json and .parquet in ``out_dir``, each written atomically; returns their paths."""
    import csv
    import io

    import pyarrow as pa

    from specbatch.common.files import atomic_write, atomic_write_json, atomic_write_text

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
