"""spec=auto for real: jobs/generate.py on the embedded model with vLLM's CPU build, pilot, replay, measurement,
decision and the rest of the rows, in float32 (greedy speculation must then reproduce spec=none token for token).

One job, an engine at a time: the pilot's, n-gram at k 3 (the prior's likeliest: no earlier run), started roomy so
that the measurement of k 5 runs in it with its k raised in place; spec=none's only where the model says none could
win, and the winner's only when it is not the engine open then.
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

ROWS = 10


def overrides(root: Path) -> list[str]:
    return [
        f"output_root={root}",
        "spec=auto",
        "spec.auto.candidates=[none,ngram-k3,ngram-k5]",
        # Slices of 1 row, and measuring allowed however short the job and whatever it could gain: this test is
        # about the mechanics, not the batch, the budget or what measuring is worth.
        "spec.auto.slice_rows=1",
        "spec.auto.budget=1",
        "spec.auto.always_measure=true",
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


def _parts(folder: RunFolder) -> list[tuple[str, list[dict]]]:
    return [
        (folder.read_part_stats(n)["setup"], pq.read_table(folder.part_path(n)).to_pylist())
        for n in folder.part_numbers()
    ]


def test_every_row_once_each_named_by_the_set_up_that_made_it(run: dict) -> None:
    rows, folder, decision, plan = run["rows"], run["folder"], run["decision"], run["plan"]
    assert sorted(r["row_id"] for r in rows) == sorted(f"HumanEval/{i}" for i in range(ROWS))
    assert all(r["status"] == "ok" and r["completion_tokens"] > 0 for r in rows)
    parts = _parts(folder)
    # Pilot: 3 slices of 1 row with n-gram k 3; then 3 slices of k 5 (and 3 of none when it is measured); the rest.
    measured = 3 * len(plan["measure"])
    assert [setup for setup, _ in parts[: 3 + measured]] == ["ngram-k3"] * 3 + [
        label for label in plan["measure"] for _ in range(3)
    ]
    assert {setup for setup, _ in parts[3 + measured :]} <= {decision["winner"]}
    for setup, part_rows in parts:
        assert {
            f"{r['method']}-k{r['num_speculative_tokens']}" if r["num_speculative_tokens"] else r["method"]
            for r in part_rows
        } == {setup}

    # k 5 ran in the engine started at k 3, raised in place: its steps drafted more than 3 tokens.
    def most_drafted(label: str) -> float:
        steps = [r["draft_tokens"] / r["spec_steps"] for s, rs in parts if s == label for r in rs if r["spec_steps"]]
        return max(steps)

    assert most_drafted("ngram-k3") <= 3 < most_drafted("ngram-k5")
    assert "ngram-k3's engine set to ngram-k5 in place" in run["log"]


def test_the_prediction_and_the_measurements_decide(run: dict) -> None:
    plan, decision = run["plan"], run["decision"]
    assert plan["pilot"] == "ngram-k3" and plan["measuring"] and plan["measure"][0] == "ngram-k5"
    assert plan["measure"][1:] in ([], ["none"])
    # Replayed on the pilot's completions, through vLLM's own n-gram matcher: edits copy their prompt.
    assert {p["label"] for p in plan["predicted"]} == {"ngram-k3", "ngram-k5"}
    assert all(p["predicted_acceptance_length"] > 1.5 for p in plan["predicted"])
    # Priced with the costs of the pilot's own steps, not the prior.
    assert "steps of a speculative engine timed here" in plan["costs"]["speculative_source"]
    by_setup = {c["setup"]: c for c in decision["candidates"]}
    for label in ("ngram-k3", *plan["measure"]):
        assert len(by_setup[label]["slices_tok_s"]) == 3 and all(r > 0 for r in by_setup[label]["slices_tok_s"])
    assert decision["measured"] and decision["winner"] in ("none", "ngram-k3", "ngram-k5")
    assert "spec=auto decided" in run["log"]
    # One engine at a time: the pilot's, none's if measured, and the winner's when it is not the one open then.
    started = run["log"].count("spec=auto: engine for")
    open_last = plan["measure"][-1]
    again = decision["winner"] != open_last and not {decision["winner"], open_last} <= {"ngram-k3", "ngram-k5"}
    assert started == 1 + ("none" in plan["measure"]) + again


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
    assert sum(figures["rows"] for label, figures in per_setup.items() if label != "(speculative)") == ROWS
    assert per_setup["ngram-k5"]["rows"] >= 3 and "measured" in per_setup["ngram-k5"]["roles"]
    assert per_setup["ngram-k3"]["roles"][0] == "pilot" and "winner" in per_setup[run["decision"]["winner"]]["roles"]
    speculative = per_setup["(speculative)"]
    assert speculative["accepted_tokens"] == sum(r["accepted_tokens"] for r in ngram_rows) > 0
    assert speculative["mean_acceptance_length"] > 1.0

    profile = read_profile(folder.profile_path)
    assert schema_problems(profile) == [] and profile["validation"]["mean_consistency"]["passed"]
    assert profile["method"] == "auto" and profile["specbatch"]["rows"] == len(ngram_rows)
    assert profile["mean_accept_length"] == pytest.approx(speculative["mean_acceptance_length"], abs=1e-6)
    assert profile["specbatch"]["setups"]["ngram-k3"]["rows"] == per_setup["ngram-k3"]["rows"]

    client = MlflowClient(tracking_uri=f"sqlite:///{run['root']}/mlflow.db")
    (mlflow_run,) = client.search_runs([client.get_experiment_by_name("auto").experiment_id])
    metrics = mlflow_run.data.metrics
    assert metrics["setup/ngram-k3/rows"] + metrics["setup/ngram-k5/rows"] == len(ngram_rows)
    assert metrics["setup/speculative/mean_acceptance_length"] == pytest.approx(speculative["mean_acceptance_length"])
    artifacts = {a.path for a in client.list_artifacts(mlflow_run.info.run_id, "speculation_profile")}
    assert artifacts == {"speculation_profile/speculation_profile.json"}
