"""Is speculation worth it here, and with which k? Speedup over spec=none, acceptance, greedy equality and, under
sampling, whether the output distribution is the baseline's (analysis.distribution) and the target's (its referee's
verdict, analysis.lossless.verdicts).

Runs are matched to a baseline (``spec=none``) that generated the same prompts with the same model, dtype, sampling
and engine at the same batch size: everything in the run's config except the speculative method, the repeat number
and where things are written. Throughput comes from the stored timings (generation seconds of the streaming loop,
engine start excluded); repeats of one set-up give a mean and a spread. Equality is checked row by row against the
baseline's token ids: in float32 greedy decoding speculation must reproduce them exactly; in bfloat16 near-tied
logits flip with the shape of the computation, so the report also says how often the baseline differs from itself
across batch sizes. Under sampling equal tokens are not expected at all: there each run's samples are tested
against its baseline's as two samples of one distribution, and compare reads the referee's check if it was run.
"""

from __future__ import annotations

import logging
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from specbatch.analysis.comparison_rows import BaselineConsistency, CompareRow, RunFigures
from specbatch.analysis.distribution import DistributionCheck, distribution_checks, shared_seeds_note
from specbatch.analysis.k_schedules import KSchedule, build_schedules
from specbatch.analysis.lossless.verdicts import LosslessRow, lossless_rows
from specbatch.analysis.predicted import PredictedRow, predicted_rows
from specbatch.analysis.recommend import MIN_REPEATS, REPEATS_OVERRIDE, Recommendation, recommend, speedup_stats
from specbatch.analysis.run_data import RowKey, RunData
from specbatch.engine.acceptance_settings import differences
from specbatch.methods import schedule_key
from specbatch.run.summary import merge_summaries

log = logging.getLogger(__name__)

# Rows listed with their first differing token, per compared run (the rest are only counted).
MAX_LISTED_DIFFERENCES = 20


class CompareError(ValueError):
    """The runs given cannot be compared (no baseline, unfinished runs, nothing found); says what to run."""


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
class Comparison:
    rows: list[CompareRow]
    recommendations: list[Recommendation]
    baseline_consistency: list[BaselineConsistency]
    notes: list[str]
    # Per workload and method measured at several batch sizes: its k at each (analysis/schedule.py).
    schedules: list[KSchedule] = field(default_factory=list)
    # Per compared run folder that has a baseline.
    run_figures: list[RunFigures] = field(default_factory=list)
    # Per measured n-gram or suffix set-up: its AL and speedup predicted by replay (analysis/predicted.py).
    predicted: list[PredictedRow] = field(default_factory=list)
    # Per sampled speculative run: its samples against its baseline's (analysis/distribution.py).
    distribution: list[DistributionCheck] = field(default_factory=list)
    # Per sampled run: the referee's recorded verdict (analysis/lossless/verdicts.py).
    lossless: list[LosslessRow] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows": [asdict(r) for r in self.rows],
            "recommendations": [asdict(r) for r in self.recommendations],
            "baseline_consistency": [asdict(b) for b in self.baseline_consistency],
            "notes": self.notes,
            "schedules": [asdict(s) | {"override": s.override} for s in self.schedules],
            "run_figures": [asdict(f) for f in self.run_figures],
            "predicted": [asdict(p) for p in self.predicted],
            "distribution": [asdict(d) for d in self.distribution],
            "lossless": [asdict(x) for x in self.lossless],
        }


def _mean_std(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def _one_per_measurement(runs: Iterable[RunData]) -> tuple[list[RunData], list[str]]:
    """Copies of one run folder are one measurement, not independent repeats (they would shrink the spread to 0
    and drop the "provisional" flag): the first by path is kept, and a note names the others."""
    kept: dict[str, RunData] = {}
    unique, notes = [], []
    for run in sorted(runs, key=lambda r: str(r.root)):
        first = kept.get(run.measurement) if run.measurement else None
        if first is not None:
            notes.append(f"{run.root} is a copy of {first.root} (the same measurement): counted once")
            continue
        if run.measurement:
            kept[run.measurement] = run
        unique.append(run)
    return unique, notes


def compare(runs: Iterable[RunData]) -> Comparison:
    """Group runs by set-up, match each to its baseline, and recommend a k per batch size."""
    # A k schedule is its own set-up: never pooled with the fixed k that equals its largest k; nor is another way
    # of verifying or drafting (block verification, probabilistic drafts) pooled with vLLM's defaults.
    runs, copies = _one_per_measurement(runs)
    groups: dict[tuple[str, int, str, int | None, Any, str | None], list[RunData]] = defaultdict(list)
    for run in runs:
        groups[(run.workload, run.batch_size, run.method, run.k, schedule_key(run.k_schedule), run.variant)].append(
            run
        )
    if not groups:
        raise CompareError("no runs to compare: pass run folders, a sweep folder or --mlflow-run <parent run id>")
    for members in groups.values():
        members.sort(key=lambda r: (r.repeat, str(r.root)))
    baselines = {(w, b): members for (w, b, method, *_), members in groups.items() if method == "none"}
    if not baselines:
        raise CompareError(
            "none of the runs is a spec=none baseline, so there is nothing to measure speedup against: "
            "add spec=none to the sweep (e.g. -m spec=none,ngram,suffix) with the same model, data set and batch size"
        )
    rows, notes, figures = [], list(copies), []
    distribution: list[DistributionCheck] = []
    for (workload, batch, *_), members in sorted(groups.items(), key=_group_order):
        base = baselines.get((workload, batch))
        if base is None:
            notes.append(
                f"{members[0].root}: no spec=none run with the same prompts, model, dtype, sampling and engine at "
                f"batch size {batch}; its speedup is not computed (run spec=none with the same settings)"
            )
        row, checks = _row(members, base)
        rows.append(row)
        sampled = [] if members[0].simulated else distribution_checks(members, base)
        distribution += sampled
        notes += [shared_seeds_note(d) for d in sampled if d.result.shared_seeds]
        figures += _run_figures(members, base, checks, {d.run_folder: d for d in sampled})
    consistency = _baseline_consistency(baselines)
    dtypes = sorted({r.dtype for r in rows})
    notes.append(f"greedy equality compared in {', '.join(dtypes)}")
    inexact = [d for d in dtypes if d != "float32"]
    if inexact:
        notes.append(
            f"in {' and '.join(inexact)} near-tied logits can flip with the batch shape even without speculation: "
            "read identical rows below 1.0 against the baseline-consistency figures, not as a bug by itself"
        )
    if len({r.engine for r in rows}) > 1:
        notes.append(
            "completions of different engines and weights (e.g. vLLM's bfloat16 and llama.cpp's quantised GGUF) "
            "are not compared token by token: each run is checked against the baseline of its own engine"
        )
    if distribution:
        notes.append(
            "under sampling identical rows are not expected and say nothing about losslessness: the referee's check "
            "(every sampled token scored by the target) and the distribution check (first tokens against spec=none) do"
        )
    notes += machine_notes([run for members in groups.values() for run in members])
    notes += settings_notes([run for members in groups.values() for run in members])
    recommendations = recommend(rows)
    # Each batch size once, also when several workloads (engines, models) are short of repeats there.
    few = [str(size) for size in sorted({r.batch_size for r in recommendations if not r.enough_repeats})]
    if few:
        notes.append(
            f"too few repeats to tell at batch size {', '.join(few)}: every set-up there, the baseline included, "
            f"needs at least {MIN_REPEATS} (-m {REPEATS_OVERRIDE}); the picks there are provisional"
        )
    all_runs = [run for members in groups.values() for run in members]
    schedules = build_schedules(recommendations, all_runs)
    # Beside each measured n-gram and suffix set-up, what replaying it on its baseline's tokens predicts.
    predicted, unpredicted = predicted_rows(rows, baselines)
    notes += unpredicted
    checked = lossless_rows(all_runs)
    return Comparison(rows, recommendations, consistency, notes, schedules, figures, predicted, distribution, checked)


def machine_notes(runs: list[RunData]) -> list[str]:
    """A warning for each workload whose runs ran on more than one machine: their tok/s ratios mix two CPUs (we have
    seen 2x between two of our own), so a speedup between them says little."""
    by_workload: dict[str, dict[str, list[RunData]]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
        for line in run.machines or ["not recorded"]:
            by_workload[run.workload][line].append(run)
    notes = []
    for machines in by_workload.values():
        known = [line for line in machines if line != "not recorded"]
        if len(known) < 2:
            continue
        first = next(iter(machines.values()))[0]
        where = "; ".join(
            f"{line}: {len(members)} run(s), e.g. {members[0].root.name}" for line, members in sorted(machines.items())
        )
        note = (
            f"runs of {first.config['model']['name']} on {first.config['dataset']['name']} ran on different machines, "
            f"so the speedups between them are not comparable (re-run them on one machine): {where}"
        )
        log.warning("%s", note)
        notes.append(note)
    return notes


def settings_notes(runs: list[RunData]) -> list[str]:
    """A warning for each workload whose runs differ in a setting that changes acceptance without being part of the
    set-up (specbatch.engine.acceptance_settings): their AL and speedups then measure that setting too."""
    by_workload: dict[str, list[RunData]] = defaultdict(list)
    for run in runs:
        by_workload[run.workload].append(run)
    notes = []
    for members in by_workload.values():
        differ = differences({run.root.name: run.summary.acceptance_settings for run in members})
        if not differ:
            continue
        first = members[0]
        where = "; ".join(
            f"{key}: "
            + ", ".join(f"{value} in {len(names)} run(s), e.g. {names[0]}" for value, names in sorted(values.items()))
            for key, values in differ.items()
        )
        note = (
            f"runs of {first.config['model']['name']} on {first.config['dataset']['name']} differ in settings that "
            f"change acceptance, so their AL and speedups measure those settings too (re-run them alike): {where}"
        )
        log.warning("%s", note)
        notes.append(note)
    return notes


def _run_figures(
    members: list[RunData],
    base: list[RunData] | None,
    checks: dict[str, Equality],
    sampled: dict[str, DistributionCheck],
) -> list[RunFigures]:
    if not base:
        return []
    base_median = statistics.median(b.summary.output_tokens_per_second for b in base)
    if base_median <= 0:
        return []
    return [
        RunFigures(
            run_folder=str(m.root),
            speedup=m.summary.output_tokens_per_second / base_median,
            identical_share=checks[str(m.root)].share if str(m.root) in checks else None,
            baseline_folder=str(base[0].root),
            distribution=sampled[str(m.root)].result if str(m.root) in sampled else None,
        )
        for m in members
    ]


def _group_order(item: tuple[tuple[str, int, str, int | None, Any, str | None], list[RunData]]) -> tuple[Any, ...]:
    (workload, batch, method, k, schedule, variant), _ = item
    # A method's schedules after its fixed k's; a variant after vLLM's defaults at the same k.
    return (workload, batch, method != "none", method, schedule is not None, schedule or (), k or 0, variant or "")


def _row(members: list[RunData], base: list[RunData] | None) -> tuple[CompareRow, dict[str, Equality]]:
    """The set-up's row, and each member's equality with its reference by run folder."""
    first = members[0]
    rates = [m.summary.output_tokens_per_second for m in members]
    mean, std = _mean_std(rates)
    speedups: list[float] = []
    robust: tuple[float, float] | tuple[None, None] = (None, None)
    base_mean = None
    if base is not None:
        base_rates = [b.summary.output_tokens_per_second for b in base]
        base_mean, base_median = statistics.fmean(base_rates), statistics.median(base_rates)
        speedups = [r / base_mean for r in rates] if base_mean > 0 else []
        if base_median > 0:
            robust = speedup_stats([r / base_median for r in rates])
    # Acceptance from the repeats' summed counts (exact), not an average of averages.
    pooled = merge_summaries([m.summary for m in members])
    if first.method == "none":
        # The baseline against its own first repeat: shows run-to-run determinism when there are repeats.
        by_folder = {str(m.root): equality(m.tokens, members[0].tokens) for m in members[1:]}
    else:
        # A simulated set-up's text is not a real output: nothing to check token for token.
        real = base and not first.simulated
        by_folder = {str(m.root): equality(m.tokens, base[0].tokens) for m in members} if real else {}
    checks = list(by_folder.values())
    compared = sum(c.rows_compared for c in checks)
    identical = sum(c.identical for c in checks)
    row = CompareRow(
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
        output_tokens_per_second_median=statistics.median(rates),
        speedup_median=robust[0],
        speedup_spread=robust[1],
        k_schedule=first.k_schedule,
        variant=first.variant,
        engine=first.engine,
        prompts_key=first.prompts_key,
        tokens_per_pass=tokens_per_pass(pooled.output_tokens, pooled.accepted_tokens),
        machine="; ".join(sorted({line for m in members for line in m.machines})),
        chose=" / ".join(sorted({m.chose for m in members if m.chose})) or None,
    )
    return row, by_folder


def tokens_per_pass(output_tokens: int, accepted_tokens: int | None) -> float | None:
    """Each target pass emits one token plus the drafts it accepted: output / (output - accepted)."""
    passes = output_tokens - (accepted_tokens or 0)
    return output_tokens / passes if passes > 0 else None


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
