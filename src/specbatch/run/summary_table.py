"""The run's summary as people read it at the end of a run's log: a two-column table, its machine, per category and
(spec=auto) per set-up (what the figures mean is :mod:`specbatch.run.summary`'s)."""

from __future__ import annotations

from typing import Any

from specbatch.common.machine import machine_line
from specbatch.engine.spec_metrics import SERVER_WIDE_NOTE
from specbatch.run.summary import SPECULATIVE, Summary, role_order


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
        "prompts": "prompts (row turns)",
        "rows": "output rows (samples)",
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
    if summary.counters_scope and "server" in summary.counters_scope and summary.num_speculative_tokens is not None:
        lines.append(f"{'':<{width}}  {SERVER_WIDE_NOTE}")
    if summary.machine:
        lines.append(f"{'machine':<{width}}  {describe_machine(summary.machine)}")
    if summary.per_category:
        columns = ["rows", "error_rows", "output_tokens", "mean_acceptance_length", "draft_acceptance_rate"]
        name_width = max(len("category"), *(len(c) for c in summary.per_category))
        lines += ["", f"{'category':<{name_width}}  " + "  ".join(f"{c:>22}" for c in columns)]
        for category, figures in summary.per_category.items():
            cells = "  ".join(f"{fmt(figures.get(c)):>22}" for c in columns)
            lines.append(f"{category:<{name_width}}  {cells}")
    if summary.per_setup:
        # spec=auto: what each set-up generated, then all the drafting set-ups' rows together.
        columns = {
            "rows": "rows",
            "output_tokens_per_second": "output tok/s",
            "mean_acceptance_length": "AL",
            "draft_acceptance_rate": "acceptance rate",
        }
        # In the order the run went (the pilot, the measured set-ups, the winner), their rows together last.
        roles = {name: figures["roles"] or ["?"] for name, figures in summary.per_setup.items()}
        setups = sorted(roles, key=lambda name: (name == SPECULATIVE, role_order(roles[name][0]), name))
        name_width = max(len("set-up"), *(len(s) for s in setups))
        lines += ["", f"{'set-up':<{name_width}}  {'roles':<26}" + "".join(f"{c:>16}" for c in columns.values())]
        for setup in setups:
            figures = summary.per_setup[setup]
            played = ", ".join(figures["roles"]) if setup != SPECULATIVE else "drafting set-ups together"
            cells = "".join(f"{fmt(figures.get(c)):>16}" for c in columns)
            lines.append(f"{setup:<{name_width}}  {played:<26}{cells}")
    rule = "-" * max(len(line) for line in lines)
    return "\n".join([rule, *lines, rule])


def describe_machine(machine: dict[str, Any] | None) -> str:
    """A recorded machine as one line ("mixed: a | b" when shards or repeats ran on several)."""
    if not machine:
        return "not recorded (the version that wrote the run did not record it)"
    if machine.get("mixed"):
        return "mixed: " + " | ".join(machine["mixed"])
    return machine_line(machine) or "unknown"
