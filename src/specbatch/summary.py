"""The run's summary: throughput and acceptance from engine counter differences, as a table and as JSON."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from specbatch.records import STATUS_OK
from specbatch.spec_metrics import Counters, acceptance_length


@dataclass(frozen=True)
class Summary:
    method: str
    num_speculative_tokens: int | None
    # Output rows (every turn and sample), and how many of them are error rows (not generated).
    rows: int
    error_rows: int
    prompt_tokens: int
    output_tokens: int
    # Wall time of the generate calls only; engine start and warm-up are reported apart.
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
    # With dataset.category_column: per category, figures summed from its rows.
    per_category: dict[str, dict[str, Any]] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def scalar_metrics(self) -> dict[str, float]:
        """Numeric fields for MLflow (per-position acceptance goes in as a stepped metric instead)."""
        skip = {"method", "num_speculative_tokens", "acceptance_rate_per_position", "per_category"}
        return {k: float(v) for k, v in asdict(self).items() if k not in skip and v is not None}


def summarize(
    delta: Counters,
    *,
    method: str,
    k: int | None,
    records: list[dict[str, Any]],
    generation_seconds: float,
    engine_startup_seconds: float,
    warmup_seconds: float,
) -> Summary:
    speculative = k is not None
    drafts = delta.drafts
    return Summary(
        method=method,
        num_speculative_tokens=k,
        rows=len(records),
        error_rows=sum(r["status"] != STATUS_OK for r in records),
        prompt_tokens=delta.prompt_tokens,
        output_tokens=delta.generation_tokens,
        generation_seconds=generation_seconds,
        output_tokens_per_second=delta.generation_tokens / generation_seconds if generation_seconds > 0 else 0.0,
        engine_startup_seconds=engine_startup_seconds,
        warmup_seconds=warmup_seconds,
        drafts=drafts if speculative else None,
        draft_tokens=delta.draft_tokens if speculative else None,
        accepted_tokens=delta.accepted_tokens if speculative else None,
        mean_acceptance_length=acceptance_length(delta.accepted_tokens, drafts) if speculative else None,
        draft_acceptance_rate=(
            (delta.accepted_tokens / delta.draft_tokens if delta.draft_tokens else 0.0) if speculative else None
        ),
        acceptance_rate_per_position=(
            [a / drafts if drafts else 0.0 for a in _pad_to(delta.accepted_per_position, k)] if speculative else None
        ),
        per_category=per_category(records, speculative) if any(r["category"] is not None for r in records) else None,
    )


def per_category(records: list[dict[str, Any]], speculative: bool) -> dict[str, dict[str, Any]]:
    """Rows, output tokens and acceptance per category, from the rows' own figures (which sum to the counters)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        groups.setdefault(str(record["category"]), []).append(record)
    out: dict[str, dict[str, Any]] = {}
    for category, rows in sorted(groups.items()):
        ok = [r for r in rows if r["status"] == STATUS_OK]
        figures: dict[str, Any] = {
            "rows": len(rows),
            "error_rows": len(rows) - len(ok),
            "output_tokens": sum(r["completion_tokens"] for r in ok),
        }
        if speculative:
            drafts = sum(r["spec_steps"] or 0 for r in ok)
            draft_tokens = sum(r["draft_tokens"] or 0 for r in ok)
            accepted = sum(r["accepted_tokens"] or 0 for r in ok)
            figures.update(
                drafts=drafts,
                draft_tokens=draft_tokens,
                accepted_tokens=accepted,
                mean_acceptance_length=acceptance_length(accepted, drafts),
                draft_acceptance_rate=accepted / draft_tokens if draft_tokens else 0.0,
            )
        out[category] = figures
    return out


def _pad_to(values: tuple[int, ...], k: int | None) -> list[int]:
    n = max(len(values), k or 0)
    return list(values) + [0] * (n - len(values))


def format_table(summary: Summary) -> str:
    """A two-column table for the end of a run's log."""

    def fmt(value: Any) -> str:
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:,.3f}" if abs(value) < 100 else f"{value:,.1f}"
        if isinstance(value, list):
            return " ".join(fmt(v) for v in value)
        if isinstance(value, int):
            return f"{value:,}"
        return str(value)

    labels = {
        "method": "method",
        "num_speculative_tokens": "k (speculative tokens)",
        "rows": "output rows",
        "error_rows": "error rows (not generated)",
        "prompt_tokens": "prompt tokens",
        "output_tokens": "output tokens",
        "generation_seconds": "generation seconds",
        "output_tokens_per_second": "output tok/s",
        "engine_startup_seconds": "engine start-up seconds",
        "warmup_seconds": "warm-up seconds",
        "drafts": "drafts (spec steps)",
        "draft_tokens": "draft tokens",
        "accepted_tokens": "accepted tokens",
        "mean_acceptance_length": "mean acceptance length",
        "draft_acceptance_rate": "draft acceptance rate",
        "acceptance_rate_per_position": "acceptance per position",
    }
    data = summary.to_dict()
    width = max(len(label) for label in labels.values())
    lines = [f"{labels[key]:<{width}}  {fmt(data[key])}" for key in labels]
    if summary.per_category:
        columns = ["rows", "error_rows", "output_tokens", "mean_acceptance_length", "draft_acceptance_rate"]
        name_width = max(len("category"), *(len(c) for c in summary.per_category))
        lines += ["", f"{'category':<{name_width}}  " + "  ".join(f"{c:>22}" for c in columns)]
        for category, figures in summary.per_category.items():
            cells = "  ".join(f"{fmt(figures.get(c)):>22}" for c in columns)
            lines.append(f"{category:<{name_width}}  {cells}")
    rule = "-" * max(len(line) for line in lines)
    return "\n".join([rule, *lines, rule])
