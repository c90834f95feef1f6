"""jobs/compare.py's analysis on run folders written with the job's own layout and writers (no engine):
baseline matching, speedup from stored timings, repeats, equality, recommendations, files and plots."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hydra import compose, initialize_config_dir

from conftest import CONF_DIR, PNG_MAGIC
from specbatch.analysis.compare import CompareError, compare, first_difference
from specbatch.analysis.plots import plot_all
from specbatch.analysis.report import find_runs
from specbatch.analysis.run_data import load_run
from specbatch.analysis.tables import format_comparison, write_comparison
from specbatch.common.atomic_files import atomic_write_json, atomic_write_text
from specbatch.common.machine import Machine
from specbatch.config import ConfigError, to_plain_dict
from specbatch.config.overrides import override_values
from specbatch.engine.spec_metrics import Counters
from specbatch.run.folder import RunFolder
from specbatch.run.multirun import JOB_FILE, SWEEP_FILE
from specbatch.run.records.output_parts import SCHEMA, write_parquet
from specbatch.run.records.run_json import RUN_FORMAT
from specbatch.run.status_merge import RunIncompleteError
from specbatch.run.summary import RowTotals, summarize

SAME = {"r0": [1, 2, 3, 4], "r1": [5, 6, 7, 8]}


def write_run(
    job_factory,
    tokens: dict[str, list[int]],
    tok_per_s: float,
    *overrides: str,
    done: bool = True,
    concurrency: int | None = None,
    legacy: bool = False,
    machine: Machine | None = None,
) -> Path:
    """A finished one-shard run folder: run.json, one part, its summary with the given throughput, done marker.

    ``concurrency``: the engine's batch, as a streamed run records it (None: as runs written before streaming).
    ``legacy``: run.json as versions before run formats wrote it: no format, and the config without the keys added
    since (engine.backend, spec.k_schedule, repeat)."""
    job = job_factory("tracking=off", "max_samples=2", "model.dtype=float32", *overrides)
    layout = RunFolder.for_job(job)
    method, k = job.spec.method.value, job.spec.k
    records = [
        {name: None for name in SCHEMA.names}
        | {
            "row_id": row_id,
            "turn": 1,
            "sample_index": 0,
            "status": "ok",
            "completion_token_ids": ids,
            "completion_tokens": len(ids),
            "method": method,
            "num_speculative_tokens": k,
        }
        for row_id, ids in tokens.items()
    ]
    config = to_plain_dict(job)
    record = {"format": RUN_FORMAT, "config": config, "shard_count": 1, "created_with": {}}
    if legacy:
        del record["format"], config["engine"]["backend"], config["spec"]["k_schedule"], config["repeat"]
    atomic_write_json(layout.run_json, record)
    write_parquet(records, layout.part_path(0), to_plain_dict(job))
    out = sum(len(ids) for ids in tokens.values())
    counters = Counters(prompt_tokens=10, generation_tokens=out)
    if k:
        # Half the drafted tokens accepted, all at the first positions.
        counters = Counters(
            10, out, drafts=4, draft_tokens=4 * k, accepted_tokens=2 * k, accepted_per_position=(4,) * 2
        )
    summary = summarize(
        counters,
        method=method,
        k=k,
        totals=RowTotals(rows=len(records)),
        generation_seconds=out / tok_per_s,
        engine_startup_seconds=20.0,
        warmup_seconds=1.0,
        concurrency=concurrency,
        machine=machine.to_dict() if machine else None,
    )
    atomic_write_json(layout.stats_path, summary.to_dict())
    if done:
        atomic_write_text(layout.done_marker, "done\n")
    return layout.root


def test_speedup_comes_from_stored_timings_and_equal_rows_count(job_factory) -> None:
    base = write_run(job_factory, SAME, 10.0, "spec=none")
    spec = write_run(job_factory, SAME, 25.0, "spec=ngram")
    result = compare([load_run(base), load_run(spec)])
    none_row, ngram_row = result.rows
    assert (none_row.method, ngram_row.method, ngram_row.k) == ("none", "ngram", 3)
    assert ngram_row.speedup == pytest.approx(2.5)
    assert ngram_row.identical_share == 1.0 and ngram_row.rows_compared == 2
    assert ngram_row.mean_acceptance_length == pytest.approx(1 + 6 / 4)
    assert none_row.speedup == pytest.approx(1.0)
    assert "greedy equality compared in float32" in result.notes
    [rec] = result.recommendations
    assert (rec.method, rec.k, rec.batch_size) == ("ngram", 3, 2)


def test_a_simulated_run_is_never_checked_token_for_token_nor_recommended(job_factory) -> None:
    # spec=simulate runs to max_tokens (sampling.ignore_eos): its baseline is spec=none at equal lengths too.
    base = write_run(job_factory, SAME, 10.0, "spec=none", "sampling.ignore_eos=true")
    other = {"r0": [1, 1, 1, 1], "r1": [5, 5, 5, 5]}
    rates = "spec.synthetic_acceptance_rates=[0.8,0.5,0.2]"
    simulated = write_run(job_factory, other, 30.0, "spec=simulate", rates)
    real = write_run(job_factory, SAME, 25.0, "spec=ngram", "sampling.ignore_eos=true")
    result = compare([load_run(base), load_run(simulated), load_run(real)])
    rows = {r.method: r for r in result.rows}
    assert rows["simulate"].speedup == pytest.approx(3.0)
    assert (rows["simulate"].rows_compared, rows["simulate"].identical_share) == (0, None)
    assert rows["simulate"].variant == "simulated at acceptance rates 0.8/0.5/0.2"
    assert rows["ngram"].identical_share == 1.0
    # The faster simulated set-up is shown, not recommended: the real n-gram is.
    [rec] = result.recommendations
    assert (rec.method, rec.k) == ("ngram", 3)


AVX2 = Machine("AMD EPYC", ("avx2",), 2)
AVX512 = Machine("AMD EPYC 9R14", ("avx2", "avx512f", "avx512_bf16"), 2)


def test_runs_side_by_side_from_two_machines_are_flagged(job_factory) -> None:
    base = write_run(job_factory, SAME, 10.0, "spec=none", machine=AVX2)
    same = write_run(job_factory, SAME, 25.0, "spec=ngram", machine=AVX2)
    other = write_run(job_factory, SAME, 50.0, "spec=suffix", machine=AVX512)
    quiet = compare([load_run(base), load_run(same)])
    assert not [n for n in quiet.notes if "different machines" in n]
    assert quiet.rows[1].machine == AVX2.line()
    loud = compare([load_run(base), load_run(same), load_run(other)])
    [note] = [n for n in loud.notes if "different machines" in n]
    assert AVX2.line() in note and AVX512.line() in note and "2 run(s)" in note and "not comparable" in note
    assert "different machines" in format_comparison(loud)
    # A run written before machines were recorded is no evidence either way.
    unrecorded = write_run(job_factory, SAME, 25.0, "spec=ngram", "spec.num_speculative_tokens=5")
    assert not [n for n in compare([load_run(base), load_run(unrecorded)]).notes if "different machines" in n]


def test_repeats_give_mean_and_spread(job_factory) -> None:
    base = write_run(job_factory, SAME, 10.0, "spec=none")
    reps = [write_run(job_factory, SAME, rate, "spec=ngram", f"repeat={i}") for i, rate in enumerate([20.0, 30.0])]
    # Repeat 0 keeps the plain folder name (existing runs stay where they are); later repeats get their own.
    assert "-rep" not in reps[0].name and reps[1].name.endswith("-rep1")
    row = compare([load_run(p) for p in [base, *reps]]).rows[1]
    assert row.repeats == 2
    assert row.output_tokens_per_second == pytest.approx(25.0)
    assert row.output_tokens_per_second_std == pytest.approx(math.sqrt(50))
    assert (row.speedup, row.speedup_min, row.speedup_max) == pytest.approx((2.5, 2.0, 3.0))


def test_copies_of_one_run_folder_are_one_measurement(job_factory) -> None:
    base = write_run(job_factory, SAME, 10.0, "spec=none")
    spec = write_run(job_factory, SAME, 20.0, "spec=ngram")
    copies = [spec.with_name(f"{spec.name}-copy{i}") for i in range(2)]
    for copy in copies:
        shutil.copytree(spec, copy)
    result = compare([load_run(p) for p in [base, spec, *copies]])
    row = result.rows[1]
    assert row.repeats == 1 and row.output_tokens_per_second_std in (None, 0.0)
    assert not [r for r in result.recommendations if r.enough_repeats], "one measurement stays provisional"
    for copy in copies:
        assert f"{copy} is a copy of {spec} (the same measurement): counted once" in result.notes


def test_first_differing_token_is_reported(job_factory) -> None:
    base = write_run(job_factory, SAME, 10.0, "spec=none")
    spec = write_run(job_factory, {"r0": [1, 2, 3, 4], "r1": [5, 6, 9, 8]}, 20.0, "spec=ngram")
    row = compare([load_run(base), load_run(spec)]).rows[1]
    assert row.identical_share == 0.5
    assert row.first_differences == ["r1@token 2"]
    assert first_difference([1, 2], [1, 2, 3]) == 2 and first_difference([1], [1]) is None


def test_best_k_per_batch_size_and_bfloat16_baseline_consistency(job_factory) -> None:
    bf16 = "model.dtype=bfloat16"
    runs = [
        write_run(job_factory, SAME, 10.0, "spec=none", bf16, "chunk_size=1"),
        write_run(job_factory, {"r0": [1, 2, 3, 4], "r1": [5, 6, 7, 0]}, 40.0, "spec=none", bf16),
        write_run(job_factory, SAME, 30.0, "spec=ngram", "spec.num_speculative_tokens=2", bf16, "chunk_size=1"),
        write_run(job_factory, SAME, 25.0, "spec=ngram", "spec.num_speculative_tokens=5", bf16, "chunk_size=1"),
        write_run(job_factory, SAME, 36.0, "spec=ngram", "spec.num_speculative_tokens=2", bf16),
        write_run(job_factory, SAME, 38.0, "spec=suffix", "spec.num_speculative_tokens=5", bf16),
    ]
    result = compare([load_run(p) for p in runs])
    recs = {r.batch_size: r for r in result.recommendations}
    assert (recs[1].method, recs[1].k) == ("ngram", 2) and recs[1].speedup == pytest.approx(3.0)
    assert recs[1].best_k_per_method == {"ngram": 2}
    # At full batch nothing beats the baseline (40 tok/s): the advice is to run without speculation.
    assert (recs[2].method, recs[2].k) == ("none", None) and recs[2].best_k_per_method == {"ngram": 2, "suffix": 5}
    [consistency] = result.baseline_consistency
    assert consistency.batch_sizes == (1, 2) and consistency.identical_rows == 1 and consistency.rows_compared == 2
    assert any("bfloat16" in note for note in result.notes)
    text = format_comparison(result)
    assert "recommended at batch size 1" in text and "baseline vs itself (bfloat16), batch size 1 vs 2: 1/2" in text


def test_streamed_runs_take_the_batch_from_the_engine_and_older_runs_still_compare(job_factory) -> None:
    # Written before the engine was streamed: one chunk (chunk_size=256 > 2 prompts) per call, no engine.backend.
    old_base = write_run(job_factory, SAME, 10.0, "spec=none", legacy=True)
    # Streamed: chunk_size is durability only; the batch is the engine's concurrency (capped by the prompts).
    full = write_run(job_factory, SAME, 25.0, "spec=ngram", "chunk_size=1", concurrency=256)
    base1 = write_run(job_factory, SAME, 4.0, "spec=none", "engine.max_num_seqs=1", concurrency=1)
    bs1 = write_run(job_factory, SAME, 8.0, "spec=ngram", "engine.max_num_seqs=1", "chunk_size=1", concurrency=1)
    runs = [load_run(p) for p in (old_base, full, base1, bs1)]
    assert [r.batch_size for r in runs] == [2, 2, 1, 1]
    speedups = {(r.method, r.batch_size): r.speedup for r in compare(runs).rows}
    assert speedups[("ngram", 2)] == pytest.approx(2.5) and speedups[("ngram", 1)] == pytest.approx(2.0)


def test_no_baseline_is_one_clear_error(job_factory) -> None:
    spec = write_run(job_factory, SAME, 20.0, "spec=ngram")
    with pytest.raises(CompareError, match="add spec=none to the sweep"):
        compare([load_run(spec)])


def test_a_baseline_at_another_batch_size_does_not_count(job_factory) -> None:
    base = write_run(job_factory, SAME, 10.0, "spec=none", "chunk_size=1")
    spec = write_run(job_factory, SAME, 20.0, "spec=ngram")
    result = compare([load_run(base), load_run(spec)])
    assert result.rows[1].speedup is None
    assert any("batch size 2" in note and "run spec=none with the same settings" in note for note in result.notes)


def test_unfinished_run_is_refused(job_factory) -> None:
    root = write_run(job_factory, SAME, 20.0, "spec=ngram", done=False)
    with pytest.raises(RunIncompleteError, match="1 of 1 shards are not done"):
        load_run(root)


def test_files_and_plots(job_factory, tmp_path: Path) -> None:
    runs = [
        write_run(job_factory, SAME, 10.0, "spec=none"),
        write_run(job_factory, SAME, 20.0, "spec=ngram", "spec.num_speculative_tokens=2"),
        write_run(job_factory, SAME, 25.0, "spec=ngram"),
    ]
    result = compare([load_run(p) for p in runs])
    out = tmp_path / "cmp"
    csv_path, json_path, parquet_path = write_comparison(result, out)
    assert pq.read_table(parquet_path).num_rows == 3
    assert json.loads(json_path.read_text())["recommendations"][0]["k"] == 3
    assert csv_path.read_text().splitlines()[0].startswith("model,dataset,dtype,workload,batch_size,method,k")
    for png in plot_all(result, out):
        data = png.read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 5000, png


def test_find_runs_in_sweeps_and_folders(job_factory, tmp_path: Path) -> None:
    a = write_run(job_factory, SAME, 10.0, "spec=none")
    b = write_run(job_factory, SAME, 20.0, "spec=ngram")
    sweep = tmp_path / "sweep"
    for number, folder in enumerate([a, b]):
        atomic_write_json(sweep / str(number) / JOB_FILE, {"run_folder": str(folder)})
    atomic_write_json(sweep / SWEEP_FILE, {"parent_run_id": "abc", "tracking_uri": "sqlite:///x.db"})
    found = find_runs([sweep])
    assert found.run_folders == [a, b] and found.parent_run_id == "abc" and found.sweep_dir == sweep.resolve()
    assert set(find_runs([tmp_path / "outputs" / "runs"]).run_folders) == {a, b}
    assert find_runs([a]).run_folders == [a] and find_runs([a]).parent_run_id is None
    with pytest.raises(CompareError, match="does not exist"):
        find_runs([tmp_path / "nope"])
    # A file of a run folder names the folder to pass instead.
    with pytest.raises(CompareError, match=rf"is a file of the run folder {a}, not the folder: pass the folder, {a}"):
        find_runs([a / "run.json"])


def test_repeat_config_and_sweep_callback_are_wired(job_factory) -> None:
    with pytest.raises(ConfigError, match="repeat=-1 must be 0 or more"):
        job_factory("repeat=-1")
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        full = compose(config_name="config", return_hydra_config=True)
    assert full.hydra.callbacks.mlflow_sweep._target_ == "specbatch.tracking.sweep.MlflowSweepCallback"
    assert override_values(["spec=ngram", "+x=1", "~y"]) == {"spec": "ngram", "x": "1", "y": "(deleted)"}


def test_a_sweep_crossing_the_baseline_with_k_drops_k_for_the_baseline(tmp_path: Path) -> None:
    from specbatch.config import to_job_config
    from specbatch.run.multirun import SweepJob

    choices = {"spec": "none", "spec.num_speculative_tokens": "3", "spec.prompt_lookup_max": "5"}
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"{k}={v}" for k, v in choices.items()])
    job = to_job_config(SweepJob(tmp_path, None, choices).drop_foreign_knobs(cfg))
    assert job.spec.k is None and job.spec.prompt_lookup_max is None
    # The knobs that do apply are kept.
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["spec=ngram", "spec.num_speculative_tokens=5"])
    job = to_job_config(SweepJob(tmp_path, None, {"spec.num_speculative_tokens": "5"}).drop_foreign_knobs(cfg))
    assert job.spec.k == 5 and job.spec.prompt_lookup_max == 4


def test_a_sweep_crossing_backends_drops_a_backend_knob_for_the_others(tmp_path: Path) -> None:
    from specbatch.config import ConfigError, to_job_config
    from specbatch.run.multirun import SweepJob

    # -m engine.backend=vllm,server engine.max_concurrency=4: the vllm job drops the server's knob.
    choices = {"engine.backend": "vllm", "engine.max_concurrency": "4"}
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"{k}={v}" for k, v in choices.items()])
    with pytest.raises(ConfigError, match="engine.max_concurrency=4 is a knob of engine.backend=server"):
        to_job_config(cfg.copy())  # a single run with it is a mistake
    job = to_job_config(SweepJob(tmp_path, None, choices).drop_foreign_knobs(cfg))
    assert job.engine.backend == "vllm"
    # The server's job keeps it.
    choices = {"engine.backend": "server", "engine.max_concurrency": "4"}
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"{k}={v}" for k, v in choices.items()])
    job = to_job_config(SweepJob(tmp_path, None, choices).drop_foreign_knobs(cfg))
    assert job.engine.max_concurrency == 4


def sweep_of_two_runs(job_factory, tmp_path: Path, tracking_uri: str) -> Path:
    """A sweep folder over a baseline and an ngram run (twice as fast), whose parent run is "abc" at tracking_uri."""
    runs = [write_run(job_factory, SAME, 10.0, "spec=none"), write_run(job_factory, SAME, 20.0, "spec=ngram")]
    sweep = tmp_path / "sweep"
    for number, folder in enumerate(runs):
        atomic_write_json(sweep / str(number) / JOB_FILE, {"run_folder": str(folder)})
    atomic_write_json(sweep / SWEEP_FILE, {"parent_run_id": "abc", "tracking_uri": tracking_uri})
    return sweep


def test_an_unreachable_sweep_run_keeps_the_written_comparison(job_factory, tmp_path: Path, monkeypatch) -> None:
    from specbatch.analysis.report import run_compare

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    sweep = sweep_of_two_runs(job_factory, tmp_path, "http://127.0.0.1:9")
    with pytest.raises(CompareError, match="could not be reached"):
        run_compare(find_runs([sweep]))
    assert json.loads((sweep / "comparison" / "comparison.json").read_text())["rows"][1]["speedup"] == 2.0


def test_a_sweep_run_failing_without_a_message_is_still_one_clear_line(job_factory, tmp_path, monkeypatch) -> None:
    from specbatch.analysis.report import run_compare

    def fail_silently(client, run_id: str):
        raise RuntimeError()

    monkeypatch.setattr("mlflow.tracking.MlflowClient.get_run", fail_silently)
    sweep = sweep_of_two_runs(job_factory, tmp_path, f"sqlite:///{tmp_path}/mlflow.db")
    with pytest.raises(CompareError, match="could not be reached: RuntimeError: ; rerun with --no-mlflow or later"):
        run_compare(find_runs([sweep]))
    assert (sweep / "comparison" / "comparison.json").is_file()


def test_runs_of_an_mlflow_parent_run_are_its_childrens_run_folders(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    from specbatch.analysis.report import runs_of_parent

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(uri)
    experiment = client.create_experiment("sweeps")
    parent = client.create_run(experiment, tags={"sweep_dir": str(tmp_path / "sweep")}).info.run_id
    for folder in ["b", "a", "b"]:
        client.create_run(experiment, tags={"mlflow.parentRunId": parent, "run_folder": str(tmp_path / folder)})
    client.create_run(experiment, tags={"run_folder": str(tmp_path / "not-a-child")})
    sources = runs_of_parent(uri, parent)
    assert sources.run_folders == [tmp_path / "a", tmp_path / "b"]
    assert (sources.parent_run_id, sources.tracking_uri, sources.sweep_dir) == (parent, uri, tmp_path / "sweep")
    lonely = client.create_run(experiment).info.run_id
    with pytest.raises(CompareError, match=f"MLflow run {lonely} at {uri} has no child runs with a run_folder tag"):
        runs_of_parent(uri, lonely)
    with pytest.raises(CompareError, match=f"MLflow run nope at {uri} could not be read: MlflowException: "):
        runs_of_parent(uri, "nope")
