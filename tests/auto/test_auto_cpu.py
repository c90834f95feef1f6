"""spec=auto for real: jobs/generate.py on the embedded model with vLLM's CPU build, pilot, replay, measurement,
decision and the rest of the rows, in float32 (greedy speculation must then reproduce spec=none token for token).

One job, an engine at a time: spec=none's (the pilot), n-gram's (the measurement), and spec=none's again for the rest
only if it won.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from mlflow.tracking import MlflowClient

from conftest import compose_job, run_generate
from specbatch.run.folder import RunFolder
from specbatch.run.profile_schema import schema_problems
from specbatch.run.records.profile_file import read_profile

pytestmark = pytest.mark.slow

ROWS = 8


def overrides(root: Path) -> list[str]:
    return [
        f"output_root={root}",
        "spec=auto",
        "spec.auto.candidates=[none,ngram-k3]",
        # Slices of 1 row, and measuring allowed however short the job: this test is about the mechanics, not
        # the batch or the budget.
        "spec.auto.slice_rows=1",
        "spec.auto.budget=1",
        "model.dtype=float32",
        f"max_samples={ROWS}",
        "sampling.max_tokens=32",
        "chunk_size=4",
        "tracking.experiment=auto",
    ]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("auto")
    result = run_generate(overrides(root))
    assert result.returncode == 0, result.stderr[-4000:]
    folder = RunFolder.for_job(compose_job(overrides(root)))
    rows = [row for part in folder.parts() for row in pq.read_table(part).to_pylist()]
    return {
        "root": root,
        "folder": folder,
        "log": result.stdout + result.stderr,
        "rows": rows,
        "decision": json.loads(folder.decision_path.read_text()),
        "plan": json.loads(folder.auto_plan_path.read_text()),
    }


def test_every_row_once_each_named_by_the_set_up_that_made_it(run: dict) -> None:
    rows, folder, decision = run["rows"], run["folder"], run["decision"]
    assert sorted(r["row_id"] for r in rows) == sorted(f"HumanEval/{i}" for i in range(ROWS))
    assert all(r["status"] == "ok" and r["completion_tokens"] > 0 for r in rows)
    setups = [folder.read_part_stats(n)["setup"] for n in folder.part_numbers()]
    # Pilot: 3 slices of 1 row with none; measurement: 3 slices of 1 row with n-gram k=3; rest: 2 rows.
    assert setups[:6] == ["none"] * 3 + ["ngram-k3"] * 3
    assert setups[6:] == [decision["winner"]]
    by_row = {r["row_id"]: r for r in rows}
    for i in range(3, 6):
        assert (
            by_row[f"HumanEval/{i}"]["method"] == "ngram" and by_row[f"HumanEval/{i}"]["num_speculative_tokens"] == 3
        )
    # n-gram really drafted on the measured rows (humaneval_edit copies its prompt), and its figures are kept.
    assert sum(by_row[f"HumanEval/{i}"]["accepted_tokens"] for i in range(3, 6)) > 0


def test_the_prediction_and_the_measurements_decide(run: dict) -> None:
    plan, decision = run["plan"], run["decision"]
    assert plan["measuring"] and plan["measure"] == ["ngram-k3"]
    (predicted,) = plan["predicted"]
    # Replayed on the pilot's completions, through vLLM's own n-gram matcher: edits copy their prompt.
    assert predicted["label"] == "ngram-k3" and predicted["predicted_acceptance_length"] > 1.5
    by_setup = {c["setup"]: c for c in decision["candidates"]}
    for label in ("none", "ngram-k3"):
        assert len(by_setup[label]["slices_tok_s"]) == 3 and all(r > 0 for r in by_setup[label]["slices_tok_s"])
    assert decision["measured"] and decision["winner"] in ("none", "ngram-k3")
    assert decision["overrides"] in ("spec=none", "spec=ngram spec.num_speculative_tokens=3")
    assert "spec=auto decided" in run["log"]
    # One engine at a time: the winner's is kept for the rest when it was the last one measured.
    started = run["log"].count("spec=auto: engine for")
    assert started == (2 if decision["winner"] == "ngram-k3" else 3)


def test_the_decision_is_in_mlflow(run: dict) -> None:
    client = MlflowClient(tracking_uri=f"sqlite:///{run['root']}/mlflow.db")
    experiment = client.get_experiment_by_name("auto")
    (mlflow_run,) = client.search_runs([experiment.experiment_id])
    assert mlflow_run.data.tags["auto.winner"] == run["decision"]["winner"]
    assert mlflow_run.data.tags["auto.measured"] == "true"
    artifacts = {a.path for a in client.list_artifacts(mlflow_run.info.run_id)}
    assert {"auto_decision.json", "decision.json"} <= artifacts


def test_the_summary_profile_and_mlflow_say_what_each_set_up_generated(run: dict) -> None:
    """For real, n-gram drafting on rows that copy their prompt: the figures of the rows each set-up generated, in
    the shard summary, the speculation profile and the MLflow run's metrics."""
    folder, rows = run["folder"], run["rows"]
    summary = json.loads(folder.stats_path.read_text())
    per_setup = summary["per_setup"]
    ngram_rows = [r for r in rows if r["method"] == "ngram"]
    assert per_setup["none"]["rows"] + per_setup["ngram-k3"]["rows"] == ROWS
    assert per_setup["ngram-k3"]["rows"] == len(ngram_rows) >= 3 and "measured" in per_setup["ngram-k3"]["roles"]
    assert per_setup["none"]["roles"][0] == "pilot" and "winner" in per_setup[run["decision"]["winner"]]["roles"]
    speculative = per_setup["(speculative)"]
    assert speculative["accepted_tokens"] == sum(r["accepted_tokens"] for r in ngram_rows) > 0
    assert speculative["mean_acceptance_length"] > 1.0 and summary["mean_acceptance_length"] is None

    profile = read_profile(folder.profile_path)
    assert schema_problems(profile) == [] and profile["validation"]["mean_consistency"]["passed"]
    assert (profile["method"], profile["num_speculative_tokens"]) == ("auto", 3)
    assert profile["specbatch"]["rows"] == len(ngram_rows)
    assert profile["mean_accept_length"] == pytest.approx(speculative["mean_acceptance_length"], abs=1e-6)
    assert profile["specbatch"]["setups"]["none"]["rows"] == per_setup["none"]["rows"]

    client = MlflowClient(tracking_uri=f"sqlite:///{run['root']}/mlflow.db")
    (mlflow_run,) = client.search_runs([client.get_experiment_by_name("auto").experiment_id])
    metrics = mlflow_run.data.metrics
    assert metrics["setup/ngram-k3/rows"] == len(ngram_rows)
    assert metrics["setup/speculative/mean_acceptance_length"] == pytest.approx(speculative["mean_acceptance_length"])
    assert metrics["setup/none/rows"] == per_setup["none"]["rows"]
    artifacts = {a.path for a in client.list_artifacts(mlflow_run.info.run_id, "speculation_profile")}
    assert artifacts == {"speculation_profile/speculation_profile.json"}
