"""A run's prediction: the set-ups asked for, replayed on its turns, written beside the run (``prediction/``: JSON
with each set-up's acceptance profile in ModelOpt's schema, not measured, and a Parquet table) and logged to its
MLflow run as a table."""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specbatch.common.errors import require
from specbatch.engine.spec_metrics import histogram_from_accepted_per_position
from specbatch.methods import simulated
from specbatch.prediction.figures import OVERALL, predicted_rows
from specbatch.prediction.replay import replay
from specbatch.prediction.setups import Setup
from specbatch.prediction.turns import RunTurns, read_turns
from specbatch.run.profile_schema import OURS, acceptance_figures, build_profile
from specbatch.run.records.prediction_file import PREDICTION_DIR, write_prediction_files
from specbatch.run.speculation_profile import measurement_conditions, target_model
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
    the run's. A run at a given acceptance (spec=simulate) is refused too (ConfigError), as compare and
    check_lossless refuse it: its text holds the accepted placeholders, not an answer to draft from."""
    finished_summary(root)
    run = read_turns(root)
    method = run.config["spec"]["method"]
    require(
        not simulated(method),
        f"{run.root} ran spec.method={method}, at a given acceptance: its text is not a real output (accepted "
        "placeholders are in it), so drafting replayed on it predicts nothing. Predict from a run of a real method "
        "on the same data (e.g. its spec=none run)",
    )
    max_model_len = int(run.config["model"]["max_model_len"])
    began = time.perf_counter()
    rows = []
    for setup in setups:
        rows += predicted_rows(setup, replay(run.turns, setup, max_model_len, run.concurrency))
    return Prediction(run, rows, time.perf_counter() - began)


def profiles(prediction: Prediction) -> list[dict[str, Any]]:
    """Each set-up's acceptance profile (overall and per category) in the schema speculation_profile.json is written
    in (specbatch.run.profile_schema), ``measured`` false: replayed, not run. The set-up, its rows and completions,
    and its draft tokens past a completion's end with the AL estimated with them, are kept under its ``specbatch``
    key."""
    config = prediction.run.config
    batches = {batch for batch in prediction.run.concurrency.values() if batch}
    conditions = {
        **measurement_conditions(config, batches.pop() if len(batches) == 1 else None, None),
        "replayed": "drafting replayed on the run's token ids (jobs/predict.py), no engine drafted",
    }
    overall: dict[str, dict[str, Any]] = {}
    categories: dict[str, dict[str, Any]] = defaultdict(dict)
    for row in prediction.rows:
        if row["category"] == OVERALL:
            overall[row["setup"]] = row
        else:
            categories[row["setup"]][row["category"]] = {
                **acceptance_figures(_histogram(row), row["k"]),
                OURS: _ours(row),
            }
    return [
        build_profile(
            _histogram(row),
            row["k"],
            method=row["method"],
            measured=False,
            target_model=target_model(config["model"]),
            per_category=categories[setup],
            measurement_conditions=conditions,
            ours={"setup": setup, **_ours(row)},
        )
        for setup, row in overall.items()
    ]


def _histogram(row: dict[str, Any]) -> list[int]:
    return histogram_from_accepted_per_position(row["drafts"], row["accepted_per_position"])


# A predicted row's figures the schema has no field for.
_OURS = (
    "rows",
    "completions",
    "drafts",
    "draft_tokens",
    "accepted_tokens",
    "unverified_tokens",
    "unverified_expected_accepted",
    "acceptance_length_estimate",
)


def _ours(row: dict[str, Any]) -> dict[str, Any]:
    return {**{key: row[key] for key in _OURS}, "draft_acceptance_rate": row["acceptance_rate"]}


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
