"""The whole job for real: jobs/generate.py on the embedded model with vLLM's CPU build: none, ngram and suffix.

Runs in float32, where greedy speculation must reproduce the baseline token for token (bfloat16 is not exact on
CPU: near-tied logits flip with the shape of the computation).
"""

from __future__ import annotations

import contextlib
import json
import re
import stat
import tempfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from mlflow.tracking import MlflowClient

from conftest import compose_job, run_generate
from specbatch.engine.spec_metrics import accepted_per_position_from_histogram
from specbatch.methods.simulate import synthetic_acceptance_rates
from specbatch.prediction.predict_run import log_prediction, predict, write_prediction
from specbatch.prediction.replay import replay
from specbatch.prediction.setups import NgramSetup, SuffixSetup
from specbatch.prediction.turns import read_turns
from specbatch.run.folder import RunFolder
from specbatch.run.multirun import sweep_jobs
from specbatch.run.profile_schema import schema_problems
from specbatch.run.records.output_parts import SCHEMA, read_config_metadata
from specbatch.tracking.comparison import folder_run_ids

pytestmark = pytest.mark.slow

N_PROMPTS = 4
MAX_TOKENS = 64
EXPERIMENT = "e2e"
SPECS = ("none", "ngram", "suffix")


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("e2e")


# vLLM names its IPC sockets by UUID (in VLLM_RPC_BASE_PATH, /tmp by default).
UUID_NAME = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _sockets_in_tmp() -> set[str]:
    found = set()
    for path in Path(tempfile.gettempdir()).iterdir():
        with contextlib.suppress(OSError):  # gone meanwhile: another process's
            if UUID_NAME.fullmatch(path.name) and stat.S_ISSOCK(path.lstat().st_mode):
                found.add(str(path))
    return found


def overrides(root: Path, spec: str) -> list[str]:
    return [
        f"output_root={root}",
        f"spec={spec}",
        "model.dtype=float32",
        f"max_samples={N_PROMPTS}",
        f"sampling.max_tokens={MAX_TOKENS}",
        f"tracking.experiment={EXPERIMENT}",
        # No timing here is compared with another (only > 0 and sums): the warm-up request would cost each engine
        # ~2 s for nothing.
        "engine.warmup=false",
    ]


@pytest.fixture(scope="module")
def multirun(root: Path) -> dict:
    """The three runs once per module, through the real entry script as one multirun (an engine each, one after
    another in one process: two process starts and vLLM imports fewer than a job each)."""
    out: dict[str, dict] = {}
    sockets_before = _sockets_in_tmp()
    sweep = root / "sweep"
    result = run_generate(["-m", *overrides(root, ",".join(SPECS)), f"hydra.sweep.dir={sweep}"])
    assert result.returncode == 0, result.stderr[-4000:]
    # A normal stop leaves nothing of the engines behind and says nothing about it (each engine runs in the job's
    # process here): no "resource_tracker: ... leaked shared_memory" warning, no IPC socket in /tmp.
    assert "resource_tracker" not in result.stderr and "leaked" not in result.stderr, result.stderr[-2000:]
    assert not _sockets_in_tmp() - sockets_before, sorted(_sockets_in_tmp() - sockets_before)
    jobs = sweep_jobs(sweep)
    assert [failed for _, failed in jobs] == [None] * len(SPECS)
    for spec, (folder, _) in zip(SPECS, jobs, strict=True):
        # Each sweep job wrote where the same settings as a single job write (test_rerun_... relies on it).
        layout = RunFolder.for_job(compose_job(overrides(root, spec)))
        assert layout.root.resolve() == Path(folder).resolve(), spec
        part = layout.part_path(0)
        out[spec] = {
            "layout": layout,
            "part": part,
            "rows": {r["row_id"]: r for r in pq.read_table(part).to_pylist()},
            "summary": json.loads(layout.stats_path.read_text()),
        }
    return {"runs": out, "log": result.stdout + result.stderr}


@pytest.fixture(scope="module")
def runs(multirun: dict) -> dict[str, dict]:
    return multirun["runs"]


def test_parquet_schema_rows_and_metadata(runs: dict[str, dict]) -> None:
    for spec, run in runs.items():
        table = pq.read_table(run["part"])
        assert table.schema.remove_metadata() == SCHEMA
        assert table.num_rows == N_PROMPTS
        assert sorted(run["rows"]) == sorted(f"HumanEval/{i}" for i in range(N_PROMPTS))
        config = read_config_metadata(run["part"])
        assert config["spec"]["method"] == spec and config["model"]["dtype"] == "float32"
        assert run["layout"].done_marker.is_file()
        assert not list(run["part"].parent.glob(".*tmp*")), "a temporary file was left behind"
        for row in run["rows"].values():
            assert row["method"] == spec
            assert row["completion_tokens"] == len(row["completion_token_ids"]) > 0
            assert row["prompt"].startswith("<|im_start|>system")  # chat template applied
            assert row["finish_reason"] in ("stop", "length")
    for row in runs["none"]["rows"].values():
        # No speculation is recorded as null, not as zero acceptance.
        assert row["num_speculative_tokens"] is None
        assert all(row[c] is None for c in ("spec_steps", "draft_tokens", "accepted_tokens", "acceptance_histogram"))
    for spec, k in (("ngram", 3), ("suffix", 5)):
        for row in runs[spec]["rows"].values():
            assert row["num_speculative_tokens"] == k
            assert len(row["acceptance_histogram"]) == k + 1
            assert row["draft_tokens"] >= row["accepted_tokens"] >= 0


@pytest.mark.parametrize("spec", ["ngram", "suffix"])
def test_greedy_float32_is_token_identical_to_none(runs: dict[str, dict], spec: str) -> None:
    base, rows = runs["none"]["rows"], runs[spec]["rows"]
    for row_id in base:
        assert rows[row_id]["completion_token_ids"] == base[row_id]["completion_token_ids"], row_id
    # The comparison means something only if speculation really accepted tokens.
    assert sum(r["accepted_tokens"] for r in rows.values()) > 0


@pytest.mark.parametrize("spec", ["ngram", "suffix"])
def test_row_figures_sum_to_engine_counter_differences(runs: dict[str, dict], spec: str) -> None:
    rows, summary = list(runs[spec]["rows"].values()), runs[spec]["summary"]
    drafts = sum(r["spec_steps"] for r in rows)
    accepted = sum(r["accepted_tokens"] for r in rows)
    assert drafts == summary["drafts"] > 0
    assert accepted == summary["accepted_tokens"]
    assert sum(r["draft_tokens"] for r in rows) == summary["draft_tokens"]
    assert summary["mean_acceptance_length"] == pytest.approx(1 + accepted / drafts)
    assert summary["draft_acceptance_rate"] == pytest.approx(accepted / summary["draft_tokens"])
    per_position = [
        sum(col)
        for col in zip(*(accepted_per_position_from_histogram(r["acceptance_histogram"]) for r in rows), strict=True)
    ]
    assert summary["acceptance_rate_per_position"] == pytest.approx([a / drafts for a in per_position])
    for spec, run in runs.items():
        assert run["summary"]["output_tokens"] == sum(r["completion_tokens"] for r in run["rows"].values()), spec
        assert run["summary"]["prompt_tokens"] == sum(r["prompt_tokens"] for r in run["rows"].values()), spec
        assert run["summary"]["rows"] == N_PROMPTS
        assert run["summary"]["generation_seconds"] > 0 and run["summary"]["engine_startup_seconds"] > 0
    assert runs["none"]["summary"]["mean_acceptance_length"] is None


def test_speculative_runs_write_their_acceptance_profile(runs: dict[str, dict]) -> None:
    assert not runs["none"]["layout"].profile_path.exists()
    for spec in ("ngram", "suffix"):
        summary, layout = runs[spec]["summary"], runs[spec]["layout"]
        profile = json.loads(layout.profile_path.read_text())
        assert schema_problems(profile) == [] and profile["measured"] and profile["method"] == spec
        assert (profile["specbatch"]["rows"], profile["measurement_conditions"]["engine"]) == (N_PROMPTS, "vllm")
        assert profile["mean_accept_length"] == pytest.approx(summary["mean_acceptance_length"], abs=1e-6)
        rates = synthetic_acceptance_rates(profile)
        assert rates == pytest.approx(summary["acceptance_rate_per_position"], abs=1e-6)
        found = folder_run_ids([layout.root])[layout.root]
        listed = [a.path for a in found.client.list_artifacts(found.run_ids[0], "speculation_profile")]
        assert listed == [f"speculation_profile/{layout.profile_path.name}"]


def test_summary_table_is_printed(multirun: dict) -> None:
    # The multirun's output holds the three jobs' tables: n-gram's is the one whose method line says ngram.
    tables = re.findall(r"^-{20,}\n(.*?)\n-{20,}$", multirun["log"], re.MULTILINE | re.DOTALL)
    [table] = [t for t in tables if re.search(r"^method +ngram$", t, re.MULTILINE)]
    assert "mean acceptance length" in table and "output tok/s" in table and "engine start-up seconds" in table


def test_mlflow_run_has_params_metrics_tags_artifacts(runs: dict[str, dict], root: Path) -> None:
    client = MlflowClient(tracking_uri=f"sqlite:///{root}/mlflow.db")
    experiment = client.get_experiment_by_name(EXPERIMENT)
    logged = client.search_runs([experiment.experiment_id])
    # The multirun's parent run beside its three jobs' runs.
    [parent] = [r for r in logged if r.data.tags.get("specbatch.kind") == "sweep"]
    found = {r.data.tags["method"]: r for r in logged if r is not parent}
    assert len(logged) == 4 and set(found) == set(SPECS)
    assert all(r.data.tags["mlflow.parentRunId"] == parent.info.run_id for r in found.values())
    run = found["ngram"]
    summary = runs["ngram"]["summary"]
    assert run.info.status == "FINISHED"
    assert run.info.run_name == "ngram-k3 · bs4 · smollm2-135m-instruct"
    params = run.data.params
    assert params["spec.method"] == "ngram" and params["spec.num_speculative_tokens"] == "3"
    assert params["model.dtype"] == "float32" and params["sampling.max_tokens"] == str(MAX_TOKENS)
    assert params["max_samples"] == str(N_PROMPTS)
    metrics = run.data.metrics
    assert metrics["mean_acceptance_length"] == pytest.approx(summary["mean_acceptance_length"])
    assert metrics["accepted_tokens"] == summary["accepted_tokens"]
    assert metrics["output_tokens_per_second"] == pytest.approx(summary["output_tokens_per_second"])
    history = client.get_metric_history(run.info.run_id, "acceptance_rate_per_position")
    assert [m.step for m in sorted(history, key=lambda m: m.step)] == [0, 1, 2]
    assert [m.value for m in sorted(history, key=lambda m: m.step)] == pytest.approx(
        summary["acceptance_rate_per_position"]
    )
    tags = run.data.tags
    assert tags["k"] == "3" and tags["model"] == "smollm2-135m-instruct" and tags["dataset"] == "humaneval_edit"
    assert tags["vllm_version"] == "0.32.0" and tags["torch_version"].startswith("2.13.0")
    assert tags["device"] == "cpu" and tags["git_commit"]
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"config.yaml", "summary.json"} <= artifacts
    local = client.download_artifacts(run.info.run_id, "summary.json", str(root / "download"))
    assert json.loads(Path(local).read_text()) == summary
    # The baseline logs no acceptance metrics at all rather than zeros.
    assert "mean_acceptance_length" not in found["none"].data.metrics
    assert found["none"].data.tags["k"] == "none"


def test_rerun_of_a_finished_run_exits_without_loading_the_model(runs: dict[str, dict], root: Path) -> None:
    result = run_generate(overrides(root, "ngram"), timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "already complete" in result.stdout + result.stderr
    assert "starting vLLM" not in result.stdout + result.stderr
    assert {r["row_id"] for r in pq.read_table(runs["ngram"]["part"]).to_pylist()} == set(runs["ngram"]["rows"])


@pytest.fixture(scope="module")
def batch_one(root: Path) -> dict[str, Path]:
    """n-gram and suffix again at batch 1 (one request in the engine at a time), in one process (a multirun)."""
    sweep = root / "batch-one"
    # An experiment of their own: the other tests read EXPERIMENT's runs as the module's three.
    same = [o for o in overrides(root, "ngram,suffix") if not o.startswith("tracking.experiment=")]
    batch_one = ["engine.max_num_seqs=1", f"hydra.sweep.dir={sweep}", f"tracking.experiment={EXPERIMENT}-batch-one"]
    result = run_generate(["-m", *same, *batch_one])
    assert result.returncode == 0, result.stderr[-4000:]
    folders = [folder for folder, failed in sweep_jobs(sweep) if failed is None]
    return dict(zip(("ngram", "suffix"), folders, strict=True))


def _engine_rows(folder: Path) -> dict[tuple[str, int, int], dict]:
    layout = RunFolder(folder)
    return {(r["row_id"], r["turn"], r["sample_index"]): r for r in pq.read_table(layout.part_path(0)).to_pylist()}


@pytest.mark.parametrize("batch", ["full", "one"])
def test_replayed_ngram_drafting_is_the_engines_own(runs: dict[str, dict], batch_one, batch: str) -> None:
    """Replaying n-gram (k=3, lookup 2..4) on the baseline's tokens gives, row by row, the drafts and draft tokens
    the n-gram engine counted, and its accepted tokens per position wherever the run's tokens can tell: only a
    draft running past a completion's end is checked by the engine against tokens it cut (``unverified``)."""
    # At full batch from the baseline's tokens (the same as n-gram's: test_greedy_float32_is_token_identical_to_none);
    # at batch 1 from the run's own.
    folder = runs["ngram"]["layout"].root if batch == "full" else batch_one["ngram"]
    engine = _engine_rows(folder)
    tokens = read_turns(runs["none"]["layout"].root if batch == "full" else folder)
    replayed = replay(tokens.turns, NgramSetup(3, 2, 4), max_model_len=2048)
    assert len(replayed) == len(engine) == N_PROMPTS
    for turn, figures in replayed:
        row = engine[turn.key]
        assert (figures.drafts, figures.draft_tokens) == (row["spec_steps"], row["draft_tokens"]), turn.key
        theirs = accepted_per_position_from_histogram(row["acceptance_histogram"])
        ours = (figures.per_position + [0] * 3)[:3]
        if figures.unverified == 0:
            assert ours == theirs, turn.key
        else:
            assert all(a <= b for a, b in zip(ours, theirs, strict=True)), turn.key
            assert 0 <= row["accepted_tokens"] - figures.accepted <= figures.unverified, turn.key
    assert sum(f.accepted for _, f in replayed) > 0


@pytest.mark.parametrize("batch", ["full", "one"])
def test_replayed_suffix_decoding_is_within_five_percent_of_the_engine(runs, batch_one, batch: str) -> None:
    """Suffix decoding replayed in engine steps at the run's batch: AL within 5 % of the engine's (the engine also
    cached the tokens it cut past each completion's end, which no run keeps, and its batch order can differ)."""
    folder = runs["suffix"]["layout"].root if batch == "full" else batch_one["suffix"]
    prediction = predict(folder, [SuffixSetup(5)])
    [overall] = prediction.overall
    summary = json.loads(RunFolder(folder).stats_path.read_text())
    assert overall["rows"] == N_PROMPTS and overall["drafts"] > 0
    assert overall["acceptance_length"] == pytest.approx(summary["mean_acceptance_length"], rel=0.05)
    # Beside the run, and on its MLflow run as a table.
    out = write_prediction(prediction)
    [profile] = json.loads((out / "predicted.json").read_text())["setups"]
    assert not profile["measured"] and synthetic_acceptance_rates(profile)
    assert log_prediction(prediction)
    found = folder_run_ids([prediction.run.root])[prediction.run.root]
    [run_id] = found.run_ids
    listed = [a.path for a in found.client.list_artifacts(run_id, "prediction")]
    assert "prediction/predicted.json" in listed
