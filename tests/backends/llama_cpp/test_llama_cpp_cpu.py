"""The job on llama.cpp for real: llama-server (built by jobs/llama_cpp.sh, which make test runs beside the suite)
with the embedded SmolLM2 GGUF on one thread, greedy, 64 tokens, on 8 prompts: spec=none at batch 4 and 1,
spec=ngram at batch 4, then compare, and a kill -9 of a job in the middle of its stream."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pyarrow.parquet as pq
import pytest

from conftest import (
    NEEDS_LLAMA_SERVER,
    PROJECT_ROOT,
    LiveJob,
    assert_one_line_stop,
    run_generate,
    wait_for_llama_build,
)

pytestmark = [pytest.mark.slow, getattr(pytest.mark, NEEDS_LLAMA_SERVER)]


@pytest.fixture(scope="module", autouse=True)
def llama_server_built() -> None:
    wait_for_llama_build()


@pytest.fixture(scope="module", autouse=True)
def one_llama_thread() -> Iterator[None]:
    """Every llama-server of the module decodes on one thread (LLAMA_ARG_THREADS, which the jobs pass on), unless
    the variable is set. By default it takes a thread per core and waits at a barrier after every op: with the other
    xdist worker on the other core, one of its threads keeps losing its core and the other spins (seen with the
    machine loaded: 0.16 tokens/s). One thread has no barrier and spends its CPU on tokens only."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LLAMA_ARG_THREADS", os.environ.get("LLAMA_ARG_THREADS", "1"))
        yield


COMPARE = PROJECT_ROOT / "jobs" / "compare.py"

# 64 tokens: enough for the n-gram drafts to be accepted and for the rows to differ where llama.cpp's greedy does,
# a quarter of the default's decoding (llama-server decodes a few dozen tokens a second here).
COMMON = ["engine.backend=llama_cpp", "sampling=greedy", "sampling.max_tokens=64", "max_samples=8", "chunk_size=4"]
# Samples per prompt of the sampled run (temperature 0.7).
SAMPLES = 3
# How long llama-server may outlive a job killed with SIGKILL (the reaper polls every 0.5 s).
SURVIVAL_LIMIT_SECONDS = 10.0


def run_folder(out: Path, name: str) -> Path:
    (folder,) = [p.parent for p in (out / "runs").rglob("run.json") if p.parent.name.startswith(name)]
    return folder


def read_rows(folder: Path) -> list[dict[str, Any]]:
    return pq.read_table(sorted((folder / "data").rglob("*.parquet"))).to_pylist()


def read_stats(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "stats" / "shard-00000-of-00001.json").read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The runs and the comparison of the module, each run once."""
    out = tmp_path_factory.mktemp("llama")
    setups = {
        "none-bs4": ["spec=none", "engine.max_num_seqs=4"],
        "ngram-bs4": ["spec=ngram", "engine.max_num_seqs=4"],
        "none-bs1": ["spec=none", "engine.max_num_seqs=1"],
        # The same prompts on a second engine, for the cross-engine table (the dummy engine: no model).
        "dummy-none": ["spec=none", "engine.max_num_seqs=4", "engine.backend=dummy"],
        "dummy-ngram": ["spec=ngram", "engine.max_num_seqs=4", "engine.backend=dummy"],
    }
    sampled = [
        *("engine.backend=llama_cpp", "spec=ngram", "sampling=sampled", "sampling.max_tokens=24", "max_samples=2"),
        f"sampling.n={SAMPLES}",
        "tracking=off",  # its MLflow run is not looked at (the MLflow assertions are the greedy runs')
    ]
    outputs = {}
    # The sampled run in a folder of its own: the comparison below is of the greedy runs.
    jobs = [*((name, [*COMMON, *extra, f"output_root={out}"]) for name, extra in setups.items())]
    jobs.append(("ngram-sampled", [*sampled, f"output_root={out / 'sampled'}"]))
    for name, args in jobs:
        result = run_generate([*args, f"run_name={name}"], timeout=600)
        assert result.returncode == 0, f"{name}: {result.stdout[-2000:]}{result.stderr[-3000:]}"
        outputs[name] = result.stdout + result.stderr
    compared = subprocess.run(
        [sys.executable, str(COMPARE), str(out / "runs"), "--out", str(out / "comparison")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert compared.returncode == 0, compared.stdout[-2000:] + compared.stderr[-3000:]
    comparison = json.loads((out / "comparison" / "comparison.json").read_text())
    return {"out": out, "outputs": outputs, "compare": compared.stdout, "comparison": comparison}


def test_rows_carry_drafted_and_accepted_tokens_that_add_up_to_the_run(runs: dict[str, Any]) -> None:
    folder = run_folder(runs["out"], "ngram-bs4")
    rows, stats = read_rows(folder), read_stats(folder)
    assert len(rows) == 8 and all(r["status"] == "ok" and r["completion"] for r in rows)
    # llama-server reports drafted and accepted tokens per request, not its drafting steps.
    assert all(isinstance(r["draft_tokens"], int) and isinstance(r["accepted_tokens"], int) for r in rows)
    assert all(r["spec_steps"] is None and r["acceptance_length"] is None for r in rows)
    assert sum(r["draft_tokens"] for r in rows) == stats["draft_tokens"] > 0
    assert sum(r["accepted_tokens"] for r in rows) == stats["accepted_tokens"] > 0
    assert stats["draft_acceptance_rate"] == pytest.approx(stats["accepted_tokens"] / stats["draft_tokens"])
    assert stats["mean_acceptance_length"] is None and stats["drafts"] is None
    assert stats["output_tokens"] == sum(r["completion_tokens"] for r in rows)
    assert stats["concurrency"] == 4
    for name in ("none-bs4", "none-bs1"):
        assert all(r["draft_tokens"] is None for r in read_rows(run_folder(runs["out"], name)))
    # Its MLflow run says which engine generated it.
    db = sqlite3.connect(runs["out"] / "mlflow.db")
    engines = {value for (value,) in db.execute("select value from tags where key = 'engine'")}
    notes = [value for (value,) in db.execute("select value from tags where key = 'mlflow.note.content'")]
    db.close()
    assert {"llama_cpp", "dummy"} <= engines
    assert sum("Generated by llama.cpp's llama-server" in note for note in notes) == 3, "the three llama.cpp runs"


def test_n_samples_per_prompt_are_requests_of_their_own(runs: dict[str, Any]) -> None:
    folder = run_folder(runs["out"] / "sampled", "ngram-sampled")
    rows, stats = read_rows(folder), read_stats(folder)
    assert sorted((r["row_id"], r["sample_index"]) for r in rows) == sorted(
        (row_id, s) for row_id in {r["row_id"] for r in rows} for s in range(SAMPLES)
    )
    assert all(r["status"] == "ok" for r in rows) and (stats["prompts"], stats["rows"]) == (2, 2 * SAMPLES)
    # Each sample drew from its own seed: a prompt's samples are not one completion repeated.
    for row_id in {r["row_id"] for r in rows}:
        assert len({tuple(r["completion_token_ids"]) for r in rows if r["row_id"] == row_id}) > 1, row_id


def test_ngram_completions_against_the_baseline_and_its_own_consistency(runs: dict[str, Any]) -> None:
    comparison = runs["comparison"]
    llama = [r for r in comparison["rows"] if r["engine"] == "llama_cpp"]
    ngram = next(r for r in llama if r["method"] == "ngram")
    assert ngram["dtype"] == "gguf" and ngram["rows_compared"] == 8
    # llama.cpp's greedy is not batch-invariant (measured: 7 of 8 rows identical with n-gram drafting), so the
    # share is read against the baseline's own consistency across batch sizes, which compare reports beside it.
    assert ngram["identical_rows"] >= 4, ngram
    consistency = [c for c in comparison["baseline_consistency"] if c["dtype"] == "gguf"]
    assert len(consistency) == 1 and consistency[0]["batch_sizes"] == [1, 4]
    assert f"baseline vs itself (gguf), batch size 1 vs 4: {consistency[0]['identical_rows']}/8" in runs["compare"]
    assert ngram["tokens_per_pass"] > 1.0 and ngram["mean_acceptance_length"] is None


def test_compare_puts_the_engines_side_by_side_and_serves_with_llama_server(runs: dict[str, Any]) -> None:
    text = runs["compare"]
    assert "engines side by side on the same prompts:" in text
    table = [line for line in text.splitlines() if line.startswith("| smollm2-135m-instruct | humaneval_edit | 4 |")]
    assert [line.split(" | ")[5] for line in table] == ["dummy", "llama_cpp", "dummy", "llama_cpp"]
    assert "are not compared token by token" in text
    # Two engines short of repeats at batch size 4: the size is named once.
    assert "too few repeats to tell at batch size 4:" in text
    # Each engine's baseline is its own: both ngram rows have a speedup.
    for row in (r for r in runs["comparison"]["rows"] if r["method"] == "ngram"):
        assert row["speedup"] is not None
    # The llama.cpp pick is served by llama-server; whether n-gram beat none at batch 4 depends on the CPU (on an
    # AVX2-only EPYC it did not), so its drafting flags are asserted only when it is the pick.
    [pick] = [r for r in runs["comparison"]["recommendations"] if r["dtype"] == "gguf"]
    assert "llama-server -m" in text
    assert ("--spec-type ngram-simple" in text) == (pick["method"] == "ngram"), pick


def test_sigterm_to_the_job_and_its_llama_server_stops_in_one_line_with_whole_chunks(tmp_path: Path) -> None:
    # Slurm signals every process of the step, llama-server included: it stops serving, and the job must take that
    # as the stop it is (not as a server failure), keep only whole chunks and exit 143 within Slurm's KillWait.
    args = [*COMMON, "spec=ngram", "max_samples=24", "chunk_size=2", "engine.max_num_seqs=2", "tracking=off"]
    job = LiveJob.generate([*args, f"output_root={tmp_path}"])
    try:
        job.wait_for("chunk 0 written", timeout=300)
        pids = job.signal_every_process(signal.SIGTERM)
        signalled = time.monotonic()
        assert job.wait(timeout=60) == 143, job.output[-3000:]
        assert time.monotonic() - signalled < 30, "Slurm would have sent SIGKILL by now"
    finally:
        if job.process.poll() is None:
            job.process.kill()
    assert "stopped by SIGTERM" in job.output, job.output[-3000:]
    assert_one_line_stop(job.output)
    (folder,) = [p.parent for p in tmp_path.rglob("run.json")]
    parts = list((folder / "data").rglob("part-*.parquet"))
    assert parts and all(pq.read_table(p).num_rows == 2 for p in parts), "only whole chunks are written"
    assert not list((folder / "done").glob("*")), "the shard is not marked done"
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def test_a_file_that_is_no_gguf_is_one_line_naming_model_gguf(tmp_path: Path) -> None:
    garbage = tmp_path / "model.gguf"
    garbage.write_bytes(b"GGUF" + bytes(range(256)) * 8)  # the magic, then nothing llama.cpp can read
    result = run_generate([*COMMON, "spec=none", f"model.gguf={garbage}", "tracking=off", f"output_root={tmp_path}"])
    output = result.stdout + result.stderr
    assert result.returncode == 2, output[-3000:]
    errors = [line for line in output.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and f"llama-server exited while loading model.gguf={garbage}" in errors[0], errors
    assert "Traceback" not in output


def test_a_sigkill_of_the_job_leaves_no_llama_server(tmp_path: Path) -> None:
    args = [*COMMON, "spec=ngram", "max_samples=24", "chunk_size=2", "engine.max_num_seqs=2", "tracking=off"]
    job = LiveJob.generate([*args, f"output_root={tmp_path}"])
    try:
        job.wait_for("chunk 0 written", timeout=300)
        servers = [p for p in psutil.Process(job.process.pid).children(recursive=True) if p.name() == "llama-server"]
        assert len(servers) == 1, "the job runs one llama-server"
        os.kill(job.process.pid, signal.SIGKILL)  # the main process only, as the OOM killer does
        job.wait(timeout=30)
        deadline = time.monotonic() + SURVIVAL_LIMIT_SECONDS
        while servers[0].is_running() and servers[0].status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, f"llama-server {servers[0].pid} outlived the killed job"
            time.sleep(0.2)
    finally:
        if job.process.poll() is None:
            job.process.kill()
