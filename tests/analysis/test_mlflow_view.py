"""What a person sees in MLflow's runs table and chart view: run names that lead with what differs inside an
experiment, parent sweep runs that say what was swept, and compare's per-run figures logged onto each compared run
under one metric name (so the chart view draws one bar per run)."""

from __future__ import annotations

import pytest
from mlflow.tracking import MlflowClient
from test_compare import SAME, write_run

from specbatch.analysis.report import Sources, run_compare
from specbatch.config import to_plain_dict
from specbatch.run.folder import RunFolder
from specbatch.tracking.run_contents import run_name
from specbatch.tracking.sweep import sweep_run_name


def config(job_factory, *overrides: str) -> dict:
    return to_plain_dict(job_factory(*overrides))


@pytest.mark.parametrize(
    ("overrides", "prompts", "concurrency", "expected"),
    [
        # The configured batch, capped by the shard's prompts; the engine's own figure wins once it is known.
        (["engine.max_num_seqs=16"], 64, None, "ngram-k3 · bs16"),
        (["engine.max_num_seqs=16"], 4, None, "ngram-k3 · bs4"),
        ([], 40, None, "ngram-k3 · bs40"),
        ([], None, None, "ngram-k3 · full batch"),
        ([], 300, 256, "ngram-k3 · bs256"),
        (["spec=none", "repeat=1"], 8, 8, "none · bs8 · rep1"),
        (["spec.k_schedule=[[1,4,5],[5,256,0]]"], 8, 8, "ngram-sched-1to4k5-5to256k0 · bs8"),
    ],
)
def test_a_run_name_leads_with_method_k_and_batch(job_factory, overrides, prompts, concurrency, expected) -> None:
    cfg = config(job_factory, *overrides)
    name = run_name(cfg, RunFolder.for_job(job_factory(*overrides)), prompts, concurrency)
    assert name == f"{expected} · smollm2-135m-instruct"


def test_shards_and_merged_runs_say_so(job_factory) -> None:
    cfg = config(job_factory, "engine.max_num_seqs=4", "repeat=2")
    shard = RunFolder(RunFolder.for_job(job_factory()).root, shard_index=3, shard_count=8)
    assert run_name(cfg, shard, 10) == "ngram-k3 · bs4 · rep2 · shard 3/8 · smollm2-135m-instruct"
    assert run_name(cfg, None, part="merged") == "ngram-k3 · bs4 · rep2 · merged · smollm2-135m-instruct"


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ("spec=none,ngram max_samples=8", "sweep spec=none,ngram"),
        (
            "spec=ngram spec.num_speculative_tokens=1,2,3 engine.max_num_seqs=range(1,5) repeat=0,1,2",
            "sweep spec.num_speculative_tokens=1,2,3 × engine.max_num_seqs=range(1,5) × repeat=0,1,2",
        ),
        # A list value is one value, not a sweep; a quoted comma neither.
        ("spec.k_schedule=[[1,4,3],[5,8,0]] spec=none,ngram", "sweep spec=none,ngram"),
        ("run_name='a,b' +tracking.tags.x=1,2", "sweep tracking.tags.x=1,2"),
    ],
)
def test_a_sweep_parent_says_what_was_swept(overrides: str, expected: str) -> None:
    assert sweep_run_name(overrides.split()) == expected


def test_nothing_swept_falls_back_to_the_time() -> None:
    assert sweep_run_name(["max_samples=8"]).startswith("sweep 20")


def test_compare_logs_speedup_onto_each_compared_run(job_factory, tmp_path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    store = ["tracking.enabled=true", f"tracking.uri={uri}", "tracking.experiment=names"]

    def folder(tok_per_s: float, *overrides: str):
        return write_run(job_factory, SAME, tok_per_s, *overrides, *store)

    folders = {
        "none": folder(100.0, "spec=none"),
        "none-rep1": folder(110.0, "spec=none", "repeat=1"),
        "ngram": folder(150.0),
        "ngram-shard": folder(200.0, "spec.num_speculative_tokens=5"),
    }
    client = MlflowClient(uri)
    experiment_id = client.create_experiment("names", artifact_location=(tmp_path / "artifacts").as_uri())
    # The runs the job would have logged: one per folder, two shards for one of them, and a run elsewhere.
    runs = {}
    for label, path in folders.items():
        runs[label] = client.create_run(experiment_id, tags={"run_folder": str(path), "shard": "0/1"}).info.run_id
    second = client.create_run(experiment_id, tags={"run_folder": str(folders["ngram-shard"]), "shard": "1/2"})
    unrelated = client.create_run(experiment_id, tags={"run_folder": str(tmp_path / "elsewhere")}).info.run_id

    result = run_compare(Sources(list(folders.values())), out_dir=tmp_path / "comparison")

    def metrics(run_id: str) -> dict[str, float]:
        return client.get_run(run_id).data.metrics

    # Over the baseline's median (105 tok/s), each repeat on its own.
    assert metrics(runs["ngram"])["against_none/speedup"] == pytest.approx(150 / 105)
    assert metrics(runs["none"])["against_none/speedup"] == pytest.approx(100 / 105)
    assert metrics(runs["none-rep1"])["against_none/speedup"] == pytest.approx(110 / 105)
    for run_id in (runs["ngram-shard"], second.info.run_id):
        assert metrics(run_id)["against_none/speedup"] == pytest.approx(200 / 105)
    assert metrics(runs["ngram"])["against_none/identical_share"] == 1.0
    assert "against_none/identical_share" not in metrics(runs["none"])  # the reference itself
    tags = client.get_run(runs["ngram"]).data.tags
    assert tags["baseline_run_id"] == runs["none"] and tags["baseline_run_folder"] == str(folders["none"])
    assert tags["comparison"] == str(tmp_path / "comparison")
    assert metrics(unrelated) == {}
    # The compare run keeps a handful of metrics: the pick's speedup stepped by batch size, the runs compared.
    assert result.mlflow_run_id is not None
    compare_run = client.get_run(result.mlflow_run_id)
    assert set(compare_run.data.metrics) == {"best_speedup", "runs_compared"}
    assert compare_run.data.metrics["runs_compared"] == 4
    assert [m.step for m in client.get_metric_history(result.mlflow_run_id, "best_speedup")] == [2]


def test_throughput_and_speedup_axes_start_at_zero_and_one_batch_size_is_bars(job_factory) -> None:
    from specbatch.analysis.compare import compare
    from specbatch.analysis.plots import draw_speedup_vs_k, draw_throughput_vs_batch
    from specbatch.analysis.run_data import load_run
    from specbatch.common.png import pyplot

    # Close numbers: an axis from the data's own minimum would make 276 vs 292 look like a gulf.
    one = [write_run(job_factory, SAME, 276.0, "spec=none"), write_run(job_factory, SAME, 292.0)]
    comparison = compare([load_run(p) for p in one])
    fig, ax = draw_throughput_vs_batch(comparison)
    assert ax.get_ylim()[0] == 0 and len(ax.patches) == len(comparison.rows) == 2
    assert [t.get_text() for t in ax.get_xticklabels()] == ["none", "ngram k=3"]
    pyplot().close(fig)
    fig, ax = draw_speedup_vs_k(comparison)
    assert ax.get_ylim()[0] == 0
    pyplot().close(fig)

    two = one + [
        write_run(job_factory, SAME, 150.0, "spec=none", "engine.max_num_seqs=1", concurrency=1),
        write_run(job_factory, SAME, 170.0, "engine.max_num_seqs=1", concurrency=1),
    ]
    comparison = compare([load_run(p) for p in two])
    assert sorted({r.batch_size for r in comparison.rows}) == [1, 2]
    fig, ax = draw_throughput_vs_batch(comparison)
    assert ax.get_ylim()[0] == 0 and not ax.patches and len(ax.get_lines()) == 2
    pyplot().close(fig)


def test_the_link_shows_one_comparison_flat_and_best_first() -> None:
    from urllib.parse import parse_qs, urlsplit

    from specbatch.tracking.comparison import compared_runs_link

    link = compared_runs_link("https://me:secret@mlflow.example:5000/", "7", "/out/cmp", "against_none/speedup")
    assert link.startswith("https://mlflow.example:5000/#/experiments/7/runs?") and "secret" not in link
    query = parse_qs(urlsplit(link.split("#", 1)[1]).query)
    assert query == {
        "searchFilter": ["tags.comparison = '/out/cmp'"],
        "orderByKey": ["metrics.`against_none/speedup`"],
        "orderByAsc": ["false"],
    }
    local = compared_runs_link("sqlite:////tmp/mlflow.db", "1", "/c", "x", charts=True)
    assert local.startswith("http://127.0.0.1:5000/#/experiments/1/runs?") and local.endswith("compareRunsMode=CHART")
