"""The run's summary: throughput and acceptance from engine counter differences, as a table and as JSON."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from specbatch.common.machine import machine_line
from specbatch.engine.acceptance_settings import merged_settings
from specbatch.engine.spec_metrics import Counters, acceptance_length, steps_unknown
from specbatch.run.output_rows import STATUS_OK
from specbatch.run.step_log import merged_bucket_figures

log = logging.getLogger(__name__)

# Raw per-category sums; the derived figures (AL, acceptance rate) are recomputed from them, never averaged.
_CATEGORY_SUMS = ("rows", "error_rows", "output_tokens", "drafts", "draft_tokens", "accepted_tokens")
# Where a run with a category column counts the rows that have none (a broken line, an empty cell), so the
# per-category rows always add up to the run's rows.
UNKNOWN_CATEGORY = "(unknown)"


@dataclass
class RowTotals:
    """Counts over output rows, added up one row (or one part, or one shard) at a time in constant memory."""

    rows: int = 0
    error_rows: int = 0
    # Prompts asked (row turns: the rows of sample 0); None when a summary added in did not count them.
    prompts: int | None = 0
    # category -> raw sums.
    categories: dict[str, dict[str, int]] = field(default_factory=dict)
    # The run has a category column (dataset.category_column): rows without a category count as UNKNOWN_CATEGORY.
    # Without one, rows carry no category and there are no per-category figures.
    by_category: bool = False

    def add(self, record: dict[str, Any]) -> None:
        ok = record["status"] == STATUS_OK
        self.rows += 1
        self.error_rows += not ok
        if self.prompts is not None:
            self.prompts += record.get("sample_index", 0) == 0
        category = record.get("category")
        if category is None and not self.by_category:
            return
        name = UNKNOWN_CATEGORY if category is None else str(category)
        sums = self.categories.setdefault(name, dict.fromkeys(_CATEGORY_SUMS, 0))
        sums["rows"] += 1
        sums["error_rows"] += not ok
        if ok:
            sums["output_tokens"] += record["completion_tokens"] or 0
            sums["drafts"] += record["spec_steps"] or 0
            sums["draft_tokens"] += record["draft_tokens"] or 0
            sums["accepted_tokens"] += record["accepted_tokens"] or 0

    def merge(self, other: RowTotals) -> None:
        self.rows += other.rows
        self.error_rows += other.error_rows
        self.prompts = None if self.prompts is None or other.prompts is None else self.prompts + other.prompts
        self.by_category = self.by_category or other.by_category
        for category, theirs in other.categories.items():
            mine = self.categories.setdefault(category, dict.fromkeys(_CATEGORY_SUMS, 0))
            for key in _CATEGORY_SUMS:
                mine[key] += theirs[key]

    @classmethod
    def of(cls, rows: Iterable[dict[str, Any]], by_category: bool = False) -> RowTotals:
        totals = cls(by_category=by_category)
        for row in rows:
            totals.add(row)
        return totals


@dataclass(frozen=True)
class Summary:
    method: str
    num_speculative_tokens: int | None
    # Output rows (every turn and sample), and how many of them are error rows (not generated).
    rows: int
    error_rows: int
    prompt_tokens: int
    output_tokens: int
    # Wall time of the streaming loop (engine start and warm-up are reported apart).
    generation_seconds: float
    output_tokens_per_second: float
    engine_startup_seconds: float
    warmup_seconds: float
    # The rest are null for spec=none: "no speculation" is not "zero acceptance".
    drafts: int | None
    draft_tokens: int | None
    accepted_tokens: int | None
    mean_acceptance_length: float | None
    draft_acceptance_rate: float | None
    acceptance_rate_per_position: list[float] | None
    # Raw accepted-token counts per draft position, kept so summaries of shards can be added up exactly.
    accepted_per_position: list[int] | None = None
    # With dataset.category_column: per category, sums over its rows and the figures derived from them.
    per_category: dict[str, dict[str, Any]] | None = None
    # The batch: requests the engine ran at once (engine.max_num_seqs or its default). Null when not recorded: the
    # batch was then a chunk (specbatch.run.records.summary_file.batch_caps).
    concurrency: int | None = None
    # Where the counts come from: "engine" (the job's own engine), "server" (a server's /metrics: server-wide, valid
    # when the job was its only client), "requests" (the completions' own figures), or several joined by "+".
    # Null when not recorded (then: their engine's).
    counters_scope: str | None = None
    # The machine that generated it (specbatch.common.machine.Machine.to_dict); several shards or repeats on
    # different machines: {"mixed": [their lines]}. Null when not recorded.
    machine: dict[str, Any] | None = None
    # What its engine resolved of the settings that change acceptance silently (draft max_model_len, prefix caching,
    # chunked prefill, async scheduling, structured output, model runner, attention backend:
    # specbatch.engine.acceptance_settings). Null where the backend cannot tell, and when not recorded.
    acceptance_settings: dict[str, Any] | None = None
    # Prompts asked (row turns); ``rows`` counts their samples (sampling.n each). Null when not counted.
    prompts: int | None = None
    # Why the acceptance figures (drafts, draft and accepted tokens, AL, rates) are null in a speculative run: a
    # server's figures that could not be believed. Null when they were; where the reason was not recorded, the null
    # draft tokens still tell (``refused_acceptance``).
    acceptance_doubt: str | None = None
    # Per set-up and batch-occupancy bucket, the sums of the engine steps timed (specbatch.run.step_log) with their
    # mean step seconds and tok/s; null when no step was timed (a backend that cannot tell its steps, older runs).
    step_buckets: dict[str, dict[str, dict[str, float]]] | None = None
    # spec=auto: per set-up that generated rows (its label: none, ngram-k3, ...) its own figures, the fields of
    # SETUP_FIELDS from its own rows, counters and seconds (each phase streams on its own), and its ``roles`` in the
    # run (pilot, measured, winner, switched back to); then SPECULATIVE, every drafting set-up's rows together. The
    # top-level acceptance figures stay null: the run as a whole has no one k. Null for other runs.
    per_setup: dict[str, dict[str, Any]] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def scalar_metrics(self) -> dict[str, float]:
        """Numeric fields for MLflow (per-position acceptance goes in as a stepped metric instead)."""
        skip = {
            "method",
            "num_speculative_tokens",
            "acceptance_rate_per_position",
            "accepted_per_position",
            "per_category",
            "counters_scope",
            "machine",
            "acceptance_settings",
            "acceptance_doubt",
            "step_buckets",
            "per_setup",
        }
        return {k: float(v) for k, v in asdict(self).items() if k not in skip and v is not None}

    def refused_acceptance(self) -> str | None:
        """Why this summary left the acceptance figures of a speculative run unknown, or None when it accepted them.
        Everything built from the same figures (the speculation profile, a merge of shards or repeats) follows this
        verdict rather than judging the figures again."""
        if self.num_speculative_tokens is None or self.draft_tokens is not None:
            return None
        return self.acceptance_doubt or "its acceptance figures could not be believed"

    def counters(self) -> Counters:
        """The engine counter differences this summary was made from."""
        return Counters(
            prompt_tokens=self.prompt_tokens,
            generation_tokens=self.output_tokens,
            drafts=self.drafts or 0,
            draft_tokens=self.draft_tokens or 0,
            accepted_tokens=self.accepted_tokens or 0,
            accepted_per_position=tuple(self.accepted_per_position or ()),
        )

    def row_totals(self) -> RowTotals:
        # A baseline's categories carry no draft sums: they count as zero when shards are added up.
        categories = {c: {k: int(f.get(k, 0)) for k in _CATEGORY_SUMS} for c, f in (self.per_category or {}).items()}
        return RowTotals(
            rows=self.rows,
            error_rows=self.error_rows,
            prompts=self.prompts,
            categories=categories,
            by_category=self.per_category is not None,
        )


def summarize(
    delta: Counters,
    *,
    method: str,
    k: int | None,
    totals: RowTotals,
    generation_seconds: float,
    engine_startup_seconds: float,
    warmup_seconds: float,
    concurrency: int | None = None,
    counters_scope: str | None = None,
    machine: dict[str, Any] | None = None,
    from_a_server: bool = False,
    acceptance_settings: dict[str, Any] | None = None,
    refused: str | None = None,
    step_buckets: dict[str, dict[str, dict[str, float]]] | None = None,
    per_setup: dict[str, dict[str, Any]] | None = None,
) -> Summary:
    """The summary of ``delta``; ``refused`` says why figures it adds up were refused already (a shard's), so the
    sum of zeros they count as is not taken for zero acceptance."""
    speculative = k is not None
    drafts = delta.drafts
    per_position = _pad_to(delta.accepted_per_position, k)
    # Steps unknown (llama.cpp): no AL and no per-position figures rather than made-up ones.
    known = speculative and not steps_unknown(drafts, delta.draft_tokens)
    doubt = refused or (_not_credible(delta) if speculative and from_a_server else None)
    if doubt:
        log.warning("%s: acceptance figures of spec.method=%s left unknown", doubt, method)
        known, speculative_counts = False, False
    else:
        speculative_counts = speculative
    return Summary(
        method=method,
        num_speculative_tokens=k,
        rows=totals.rows,
        error_rows=totals.error_rows,
        prompt_tokens=delta.prompt_tokens,
        output_tokens=delta.generation_tokens,
        generation_seconds=generation_seconds,
        output_tokens_per_second=delta.generation_tokens / generation_seconds if generation_seconds > 0 else 0.0,
        engine_startup_seconds=engine_startup_seconds,
        warmup_seconds=warmup_seconds,
        drafts=drafts if known else None,
        draft_tokens=delta.draft_tokens if speculative_counts else None,
        accepted_tokens=delta.accepted_tokens if speculative_counts else None,
        mean_acceptance_length=acceptance_length(delta.accepted_tokens, drafts) if known else None,
        draft_acceptance_rate=(
            (delta.accepted_tokens / delta.draft_tokens if delta.draft_tokens else 0.0) if speculative_counts else None
        ),
        acceptance_rate_per_position=[a / drafts if drafts else 0.0 for a in per_position] if known else None,
        accepted_per_position=per_position if known else None,
        # Refused figures are not shown per category either (they are the same rows' figures).
        per_category=per_category(totals, speculative_counts) if totals.categories or totals.by_category else None,
        concurrency=concurrency,
        counters_scope=counters_scope,
        machine=machine,
        acceptance_settings=acceptance_settings,
        prompts=totals.prompts,
        acceptance_doubt=doubt,
        step_buckets=step_buckets,
        per_setup=per_setup,
    )


def _not_credible(delta: Counters) -> str | None:
    """Why a server's speculative figures (its /metrics or its answers) cannot be believed, or None. An offline
    engine's counters are its own truth (n-gram that finds nothing to draft is AL 1.0); a server may not speculate
    at all, or miscount."""
    if delta.accepted_tokens > delta.draft_tokens:
        return f"the server counted {delta.accepted_tokens} accepted of {delta.draft_tokens} drafted tokens"
    per_position = list(delta.accepted_per_position or [])
    if any(later > earlier for earlier, later in itertools.pairwise(per_position)):
        return f"the server's accepted tokens per draft position {per_position} grow with the position"
    if delta.generation_tokens and not delta.draft_tokens:
        return (
            "the server reported no drafting at all: it does not speculate (started without this spec?) or does not "
            "report it"
        )
    return None


def merged_machine(machines: Iterable[dict[str, Any] | None]) -> dict[str, Any] | None:
    """The machine of several summaries: theirs when they agree, else ``{"mixed": [each machine's line]}``."""
    lines: dict[str, dict[str, Any]] = {}
    for machine in machines:
        if machine is None:
            continue
        for line in machine.get("mixed") or [machine_line(machine)]:
            lines.setdefault(line, machine)
    if not lines:
        return None
    if len(lines) == 1:
        return next(iter(lines.values()))
    return {"mixed": sorted(lines)}


def merge_summaries(summaries: list[Summary]) -> Summary:
    """One summary for many shards, from their summed counts. Seconds are summed too (engine-seconds), so
    output tok/s is the throughput per engine, comparable with a one-shard run."""
    first = summaries[0]
    counters, totals = Counters(), RowTotals()
    for summary in summaries:
        counters = counters + summary.counters()
        totals.merge(summary.row_totals())
    return summarize(
        counters,
        method=first.method,
        k=first.num_speculative_tokens,
        totals=totals,
        generation_seconds=sum(s.generation_seconds for s in summaries),
        engine_startup_seconds=sum(s.engine_startup_seconds for s in summaries),
        warmup_seconds=sum(s.warmup_seconds for s in summaries),
        concurrency=first.concurrency,
        counters_scope=_joined_scopes(s.counters_scope for s in summaries),
        machine=merged_machine(s.machine for s in summaries),
        acceptance_settings=merged_settings(s.acceptance_settings for s in summaries),
        # One part refused makes the sum unknown: its figures count as zeros in ``counters``.
        refused=next((r for s in summaries if (r := s.refused_acceptance())), None),
        step_buckets=merged_bucket_figures(s.step_buckets for s in summaries),
        per_setup=_merged_setups(summaries),
    )


# The figures each set-up of a spec=auto run keeps (Summary.per_setup), and the key of its drafting set-ups together.
SETUP_FIELDS = tuple(
    "method num_speculative_tokens rows error_rows prompts prompt_tokens output_tokens generation_seconds "
    "output_tokens_per_second drafts draft_tokens accepted_tokens mean_acceptance_length draft_acceptance_rate "
    "acceptance_rate_per_position accepted_per_position acceptance_doubt".split()
)
SPECULATIVE = "(speculative)"
# The order roles are listed in.
SETUP_ROLES = ("pilot", "measured", "winner", "switched back to")


def setup_figures(by_setup: dict[str, Summary], roles: dict[str, list[str]]) -> dict[str, dict[str, Any]]:
    """Summary.per_setup from each set-up's own summary and its roles; SPECULATIVE adds up the drafting set-ups' counts
    (its k and per-position figures: the largest k's positions, as a k schedule's are)."""
    out = {label: _setup_entry(summary, roles.get(label, [])) for label, summary in by_setup.items()}
    drafting = [s for s in by_setup.values() if s.num_speculative_tokens is not None]
    if drafting:
        drafting.sort(key=lambda s: -(s.num_speculative_tokens or 0))
        together = merge_summaries(drafting)
        entry = _setup_entry(together, [])
        entry["method"] = "+".join(sorted({s.method for s in drafting}))
        out[SPECULATIVE] = entry
    return out


def role_order(role: str) -> int:
    """Where ``role`` comes in SETUP_ROLES (the order a run goes through them)."""
    return SETUP_ROLES.index(role) if role in SETUP_ROLES else len(SETUP_ROLES)


def _setup_entry(summary: Summary, roles: list[str]) -> dict[str, Any]:
    ordered = sorted(set(roles), key=role_order)
    return {"roles": ordered, **{name: getattr(summary, name) for name in SETUP_FIELDS}}


def _merged_setups(summaries: list[Summary]) -> dict[str, dict[str, Any]] | None:
    """The per-set-up figures of several summaries (a spec=auto run's shards), each set-up's added up."""
    by_label: dict[str, list[Summary]] = {}
    roles: dict[str, list[str]] = {}
    for summary in summaries:
        for label, entry in (summary.per_setup or {}).items():
            if label != SPECULATIVE:
                fields = {name: entry[name] for name in SETUP_FIELDS}
                by_label.setdefault(label, []).append(
                    Summary(**fields, engine_startup_seconds=0.0, warmup_seconds=0.0)
                )
                roles.setdefault(label, []).extend(entry["roles"])
    if not by_label:
        return None
    return setup_figures({label: merge_summaries(each) for label, each in by_label.items()}, roles)


def _joined_scopes(scopes: Iterable[str | None]) -> str | None:
    """The sources of several summaries' counts, each once ("engine+requests")."""
    return "+".join(sorted({part for scope in scopes if scope for part in scope.split("+")})) or None


def per_category(totals: RowTotals, speculative: bool) -> dict[str, dict[str, Any]]:
    """Per category: its sums, and AL and acceptance derived from them (the rows' figures sum to the counters)."""
    out: dict[str, dict[str, Any]] = {}
    # Sorted by name, the rows without a category last.
    for category, sums in sorted(totals.categories.items(), key=lambda item: (item[0] == UNKNOWN_CATEGORY, item[0])):
        figures: dict[str, Any] = {k: sums[k] for k in ("rows", "error_rows", "output_tokens")}
        if speculative:
            known = not steps_unknown(sums["drafts"], sums["draft_tokens"])
            figures.update(
                drafts=sums["drafts"] if known else None,
                draft_tokens=sums["draft_tokens"],
                accepted_tokens=sums["accepted_tokens"],
                mean_acceptance_length=acceptance_length(sums["accepted_tokens"], sums["drafts"]) if known else None,
                draft_acceptance_rate=(
                    sums["accepted_tokens"] / sums["draft_tokens"] if sums["draft_tokens"] else 0.0
                ),
            )
        out[category] = figures
    return out


def _pad_to(values: tuple[int, ...], k: int | None) -> list[int]:
    n = max(len(values), k or 0)
    return list(values) + [0] * (n - len(values))
