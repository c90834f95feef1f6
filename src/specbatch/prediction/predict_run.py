"""A run's prediction: the set-ups asked for, replayed on its turns, written beside the run (``prediction/``: JSON
with each set-up's acceptance profile, and a Parquet table) and logged to its MLflow run as a table."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specbatch.prediction.figures import OVERALL, predicted_rows
from specbatch.prediction.replay import replay
from specbatch.prediction.setups import Setup
from specbatch.prediction.turns import RunTurns, read_turns
from specbatch.run.records.prediction_file import PREDICTION_DIR, write_prediction_files
from specbatch.run.status_merge import finished_summary


@dataclass
class Prediction:
    run: RunTurns
    rows: list[dict[str, Any]]
    seconds: float

    @property
    def overall(self) -> list[dict[str, Any]]:
        return [row for row in self.rows if row["category"] == OVERALL]


def predict(root: Path, setups: list[Setup]) -> Prediction:
    """Replay every set-up on the finished run at ``root``; turns.NoTokenIds when it has nothing to replay.

    A run with a shard not done or damaged is refused (RunIncompleteError names them and how to finish them), as
    merge and compare refuse it: what is there is not the run, yet its prediction would be written into the run as
    the run's."""
    finished_summary(root)
    run = read_turns(root)
    max_model_len = int(run.config["model"]["max_model_len"])
    began = time.perf_counter()
    rows = []
    for setup in setups:
        rows += predicted_rows(setup, replay(run.turns, setup, max_model_len, run.concurrency))
    return Prediction(run, rows, time.perf_counter() - began)


def profiles(prediction: Prediction) -> list[dict[str, Any]]:
    """Each set-up's acceptance profile (overall and per category), in the form of speculation_profile.json."""
    by_setup: dict[str, dict[str, Any]] = {}
    for row in prediction.rows:
        entry = by_setup.setdefault(
            row["setup"], {"setup": row["setup"], "method": row["method"], "k": row["k"], "categories": {}}
        )
        profile = {key: value for key, value in row.items() if key not in ("setup", "method", "k", "category")}
        if row["category"] == OVERALL:
            entry.update(profile)
            # What vLLM's synthetic rejection sampler takes for this set-up.
            entry["synthetic_acceptance_rates"] = row["marginal_acceptance"]
        else:
            entry["categories"][row["category"]] = profile
    return list(by_setup.values())


def write_prediction(prediction: Prediction) -> Path:
    """prediction/predicted.json and predicted.parquet in the run folder; the folder."""
    out = prediction.run.root / PREDICTION_DIR
    skipped = prediction.run.skipped
    record = {
        "run": str(prediction.run.root),
        "completions": len(prediction.run.turns),
        "skipped": [{"row_id": r, "turn": t, "why": why} for r, t, why in skipped],
        "setups": profiles(prediction),
    }
    write_prediction_files(out, record, prediction.rows)
    return out


def log_prediction(prediction: Prediction) -> bool:
    """The prediction table on the run's MLflow run(s) (``prediction/predicted.json``); False when the run has no
    MLflow run (tracking off, or not in its store)."""
    from specbatch.tracking.comparison import folder_run_ids

    found = folder_run_ids([prediction.run.root]).get(prediction.run.root)
    if found is None:
        return False
    columns = {key: [row[key] for row in prediction.rows] for key in prediction.rows[0]}
    for run_id in found.run_ids:
        found.client.log_table(run_id, data=columns, artifact_file=f"{PREDICTION_DIR}/predicted.json")
    return True


def format_prediction(prediction: Prediction) -> str:
    """The overall figures per set-up, one line each, with the rows left out and why."""
    run = prediction.run
    lines = [
        f"{run.root}: {len(run.turns)} completions replayed in {prediction.seconds:.1f} s",
        f"{'set-up':<26} {'drafts':>8} {'draft tok':>10} {'accepted':>9} {'AL':>6} {'rate':>6}  per position",
    ]
    for row in prediction.overall:
        positions = " ".join(f"{rate:.2f}" for rate in row["marginal_acceptance"])
        lines.append(
            f"{row['setup']:<26} {row['drafts']:>8} {row['draft_tokens']:>10} {row['accepted_tokens']:>9} "
            f"{row['acceptance_length']:>6.3f} {row['acceptance_rate']:>6.3f}  {positions}"
        )
    for row in prediction.overall:
        if row["unverified_tokens"]:
            lines.append(
                f"{row['setup']}: {row['unverified_tokens']} draft tokens ran past a completion's end (the engine "
                "checks them against tokens it generated and cut, which the run does not keep): not accepted above; "
                f"at the acceptance seen elsewhere about {row['unverified_expected_accepted']:.0f} would be, "
                f"AL {row['acceptance_length_estimate']:.3f}"
            )
    if run.skipped:
        reasons: dict[str, list[str]] = {}
        for row_id, turn, why in run.skipped:
            reasons.setdefault(why, []).append(f"{row_id}#{turn}")
        for why, rows in reasons.items():
            shown = ", ".join(rows[:5]) + (f" and {len(rows) - 5} more" if len(rows) > 5 else "")
            lines.append(f"not replayed ({why}): {len(rows)}: {shown}")
    return "\n".join(lines)
