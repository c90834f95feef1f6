"""The lossless check in compare's table and comparison.json: each sampled run's recorded verdict.

The referee is slow next to reading rows (about 11 ms a token on 2 cores), so compare does not run it: it reads what
``jobs/check_lossless.py RUN`` wrote to ``RUN/lossless/lossless.json`` and says how to check a run that has none, or
whose record no longer covers its rows (a run resumed or extended after its check).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specbatch.analysis.lossless.run_check import result_path
from specbatch.analysis.run_data import RunData

NOT_CHECKED = "not checked"
STALE = "stale"


@dataclass(frozen=True)
class LosslessRow:
    """One sampled run (the baseline too: its check is the engine's sampler without speculation)."""

    run_folder: str
    method: str
    k: int | None
    batch_size: int
    temperature: float
    top_k: int
    top_p: float
    # differs / consistent / too few tokens (the check's), or not checked / stale (then ``why`` says what to run).
    verdict: str
    why: str
    tokens: int | None = None
    p_value: float | None = None
    detectable_temperature_error: float | None = None
    tokens_needed: int | None = None
    referee_seconds: float | None = None


def lossless_rows(runs: list[RunData]) -> list[LosslessRow]:
    """Every sampled run's row, greedy runs left out (token equality is their check), and simulated ones (their
    text is not a real output)."""
    return [_row(run) for run in runs if float(run.config["sampling"]["temperature"]) > 0 and not run.simulated]


def _row(run: RunData) -> LosslessRow:
    sampling = run.config["sampling"]
    plain = {
        "run_folder": str(run.root),
        "method": run.method,
        "k": run.k,
        "batch_size": run.batch_size,
        "temperature": float(sampling["temperature"]),
        "top_k": int(sampling["top_k"]),
        "top_p": float(sampling["top_p"]),
    }
    command = f"python jobs/check_lossless.py {run.root}"
    path = result_path(run.root)
    if not path.exists():
        return LosslessRow(**plain, verdict=NOT_CHECKED, why=f"to check it: {command}")
    try:
        record: dict[str, Any] = json.loads(path.read_text())
        figures, referee = record["figures"], record["referee"]
        verdict, why, checked_tokens = str(record["verdict"]), str(record["why"]), int(referee["tokens"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return LosslessRow(**plain, verdict=STALE, why=f"{path} is unreadable ({exc}); check again: {command}")
    tokens = sum(len(t) for t in run.tokens.values())
    if checked_tokens != tokens:
        why = f"checked on {checked_tokens} tokens, the run now holds {tokens}; check again: {command}"
        return LosslessRow(**plain, verdict=STALE, why=why)
    return LosslessRow(
        **plain,
        verdict=verdict,
        why=why,
        tokens=figures.get("tokens"),
        p_value=figures.get("p_value"),
        detectable_temperature_error=figures.get("detectable_temperature_error"),
        tokens_needed=figures.get("tokens_needed"),
        referee_seconds=referee.get("seconds"),
    )


def lossless_table(rows: list[LosslessRow]) -> list[str]:
    """The rows as Markdown, after compare's other tables."""
    if not rows:
        return []

    def num(value: float | None, spec: str) -> str:
        return "-" if value is None else format(value, spec)

    lines = [
        "",
        "lossless under sampling, each sampled token scored by the target itself (jobs/check_lossless.py; "
        "detectable: the temperature error it would have caught with power 0.8):",
        "| batch | method | k | temperature / top-k / top-p | tokens | p | detectable | referee s | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.batch_size} | {r.method} | {r.k or '-'} | {r.temperature:g} / {r.top_k} / {r.top_p:g} | "
            f"{num(r.tokens, 'd')} | {num(r.p_value, '.2g')} | {num(r.detectable_temperature_error, '.0%')} | "
            f"{num(r.referee_seconds, '.0f')} | {r.verdict} |"
        )
    lines += [f"- {Path(r.run_folder).name}: {r.verdict}: {r.why}" for r in rows]
    return lines
