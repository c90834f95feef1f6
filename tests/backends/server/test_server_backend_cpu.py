"""The job against a real vLLM server on loopback (embedded SmolLM2 + ngram, float32 greedy, with an API key).

One server for the module (started as jobs/serve.py starts it). The fault test kills it in the middle of a job and
starts it again through jobs/serve.py itself; the last test then checks that serve.py (Dynamo's chat request, where
the key goes, SIGTERM ending it all), so one vLLM server start serves both. The offline job runs once on the same
prompts, as the reference the server's results must equal.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pyarrow.parquet as pq
import pytest

from conftest import PROJECT_ROOT, LiveJob, assert_one_line_stop, compose_job, run_generate, wait_group_gone
from mlflow_server import free_port
from specbatch.backends.vllm.serve_commands import SAKURA_MAX_TOKENS, SAKURA_PROMPT
from specbatch.backends.vllm.vllm_server import VllmServer
from specbatch.serving import child_server, reaper

pytestmark = pytest.mark.slow

SERVE = PROJECT_ROOT / "jobs" / "serve.py"
KEY = "sk-specbatch-test-5b0e2c7d91f4"
# float32 greedy: the server's completions must equal the offline job's token for token.
SETUP = ["spec=ngram", "model.dtype=float32", "sampling=greedy"]
ROWS = 8
# Completions of the tests that stop a job or look at rows' statuses only: they compare nothing with the offline
# job, so they need not decode 256 tokens a row; at 48 a pair of rows is still a second or more of decoding, so a
# stop after a given chunk still finds most of the job's chunks to go.
SHORT = "sampling.max_tokens=48"


class Server:
    """The module's server: started by this process first; the fault test kills it and starts it again as
    jobs/serve.py, which the last test stops with SIGTERM."""

    def __init__(self, port: int, root: Path) -> None:
        self.url = f"http://127.0.0.1:{port}/v1"
        self.overrides = [*SETUP, f"engine.url={self.url}", f"output_root={root}"]
        self.job = compose_job(self.overrides)
        self.process: VllmServer | None = None
        self.serve_job: LiveJob | None = None

    def start(self) -> None:
        self.process = VllmServer.start(self.job, timeout=300)

    def kill(self) -> None:
        """SIGKILL to the server's whole process group, as a crash or a node loss would."""
        assert self.process is not None
        self.process.kill()

    def serve(self) -> LiveJob:
        """jobs/serve.py serving the same set-up at the same URL, once it says it serves (the server this process
        started is stopped first if it still runs: a test run on its own)."""
        if self.serve_job is None:
            if self.process is not None:
                self.process.stop()
            self.serve_job = LiveJob([sys.executable, str(SERVE), *self.overrides], env={"OPENAI_API_KEY": KEY})
        self.serve_job.wait_for("Ctrl-C or SIGTERM stops the server", timeout=300)
        return self.serve_job

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
        job = self.serve_job
        if job is not None and job.process.poll() is None:
            job.process.send_signal(signal.SIGTERM)
            try:
                job.wait(timeout=60)
            except subprocess.TimeoutExpired:
                job.process.kill()
                job.wait(timeout=30)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with pytest.MonkeyPatch.context() as patch:
        # The server requires the key (jobs/serve.py passes it on from engine.api_key_env's variable).
        patch.setenv("OPENAI_API_KEY", KEY)
        served = Server(free_port(), tmp_path_factory.mktemp("serve"))
        rendezvous_before = _rendezvous_files()
        served.start()
        try:
            yield served
        finally:
            served.stop()
        # vLLM's workers meet through a file in their temp folder, which a killed server (the fault test) or its
        # stop left in /tmp: the servers' temp folder is their own, removed with them.
        assert not _rendezvous_files() - rendezvous_before, sorted(_rendezvous_files() - rendezvous_before)


def _rendezvous_files() -> set[str]:
    return {str(path) for path in Path(tempfile.gettempdir()).glob("vllm_dist_*")}


@pytest.fixture(scope="module")
def offline(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The offline job on the same prompts: its rows by row id, and its summary."""
    out = tmp_path_factory.mktemp("offline")
    result = run_generate([*SETUP, f"max_samples={ROWS}", f"output_root={out}", "tracking=off"])
    assert result.returncode == 0, result.stderr[-3000:]
    return {"rows": rows_by_id(out), "summary": summary_of(out)}


def server_job(server: Server, out: Path, *extra: str, key: str = KEY) -> tuple[int, str]:
    job = LiveJob.generate(
        [*SETUP, "engine.backend=server", f"engine.url={server.url}", f"output_root={out}", *extra],
        env={"OPENAI_API_KEY": key},
    )
    code = job.wait(timeout=600)
    return code, job.output


def run_folder(out: Path) -> Path:
    (folder,) = [p.parent for p in (out / "runs").rglob("run.json")]
    return folder


def rows_by_id(out: Path) -> dict[str, dict[str, Any]]:
    folder = run_folder(out)
    rows = pq.read_table(sorted((folder / "data").rglob("*.parquet"))).to_pylist()
    assert len({r["row_id"] for r in rows}) == len(rows), "every row exactly once"
    return {r["row_id"]: r for r in rows}


def summary_of(out: Path) -> dict[str, Any]:
    return json.loads((run_folder(out) / "stats" / "shard-00000-of-00001.json").read_text())


def test_the_server_job_equals_the_offline_job_and_keeps_the_key_secret(
    server: Server, offline: dict[str, Any], tmp_path: Path
) -> None:
    out = tmp_path / "outputs"
    code, output = server_job(server, out, f"max_samples={ROWS}")
    assert code == 0, output[-3000:]
    rows, summary = rows_by_id(out), summary_of(out)
    # Same schema, and every column of every row equal: completions, token ids, and vLLM's per-row figures. Except
    # the order the engine answered them in: the server's requests reach its scheduler one by one, so which rows
    # share a step (and so finish first) depends on when each arrived on a loaded machine, not on the job (seen in
    # a fresh-clone suite: one row answered first by the server, fourth offline, every token the same).
    assert rows.keys() == offline["rows"].keys() and len(rows) == ROWS
    assert sorted(row["answer_order"] for row in rows.values()) == list(range(ROWS))
    for row_id, row in rows.items():
        assert {**row, "answer_order": None} == {**offline["rows"][row_id], "answer_order": None}, row_id
    # The shard's acceptance from the server's /metrics equals the offline engine's counters.
    reference = offline["summary"]
    for key in ("drafts", "draft_tokens", "accepted_tokens", "mean_acceptance_length", "accepted_per_position"):
        assert summary[key] == reference[key], key
    assert summary["mean_acceptance_length"] > 1.5
    assert summary["counters_scope"] == "server" and reference["counters_scope"] == "engine"
    assert "server-wide" in output
    # MLflow says where the figures come from.
    db = sqlite3.connect(out / "mlflow.db")
    tags = dict(db.execute("select key, value from tags"))
    assert tags["counters_scope"] == "server" and tags["engine"] == "server"
    assert "server-wide" in tags["mlflow.note.content"]
    params = dict(db.execute("select key, value from params"))
    assert params["engine.url"] == server.url and params["engine.api_key_env"] == "OPENAI_API_KEY"
    db.close()
    # The key is in no file the job wrote (Parquet, JSON, MLflow's store and artifacts, Hydra's) and no log line.
    assert KEY not in output
    for path in out.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


def test_the_chat_api_gives_the_same_completions(server: Server, offline: dict[str, Any], tmp_path: Path) -> None:
    """A server that takes no token ids is asked through its chat API; vLLM applies the same template."""
    out = tmp_path / "outputs"
    code, output = server_job(server, out, "max_samples=3", "engine.api=chat", "tracking=off")
    assert code == 0, output[-3000:]
    for row_id, row in rows_by_id(out).items():
        assert row["status"] == "ok" and row["completion"] == offline["rows"][row_id]["completion"], row_id


def test_a_request_the_server_refuses_is_an_error_row_and_the_rest_go_on(server: Server, tmp_path: Path) -> None:
    data = tmp_path / "rows.jsonl"
    long_text = " ".join(f"word{i}" for i in range(3000))  # over the server's max_model_len of 2048
    data.write_text("".join(json.dumps({"id": f"r{i}", "q": q}) + "\n" for i, q in enumerate(["hi", long_text, "yo"])))
    out = tmp_path / "outputs"
    local = ["dataset=local", f"dataset.path={data}", "dataset.template='{q}'", "dataset.id_column=id"]
    # The job's own length check is told the model is longer, so only the server can refuse the long row.
    code, output = server_job(server, out, *local, "model.max_model_len=32768", SHORT, "tracking=off")
    assert code == 0, output[-3000:]
    rows = rows_by_id(out)
    assert [rows[r]["status"] for r in ("r0", "r1", "r2")] == ["ok", "error", "ok"]
    assert rows["r1"]["error"].startswith("the server answered HTTP 400")
    assert "maximum context length" in rows["r1"]["error"] or "max_model_len" in rows["r1"]["error"]


def test_a_wrong_key_is_one_error_naming_the_variable(server: Server, tmp_path: Path) -> None:
    out = tmp_path / "outputs"
    code, output = server_job(server, out, "max_samples=1", key="sk-wrong-key-0000")
    assert code == 2, output[-3000:]
    assert "refused the API key: set the variable engine.api_key_env names (OPENAI_API_KEY)" in output
    assert not (out / "runs").exists()


def test_group_sigterm_finishes_chunks_in_flight_a_killed_server_loses_nothing_finished_a_rerun_does_every_row_once(
    server: Server, tmp_path: Path
) -> None:
    """One run folder takes both faults, each checked, then one rerun finishes it: SIGTERM to the job's group (as
    Ctrl-C, `timeout` and systemd send it; the server, serving others too, is not in it), then the job started
    again has the server killed under it. It kills the module's server and starts it again, as jobs/serve.py."""
    out = tmp_path / "outputs"
    # 12 chunks of 2 rows: the SIGTERM lands after the first, the kill after the resumed job's first (at most 6
    # chunks written by then: 2 in flight at each signal), whatever the machine's speed.
    args = [
        *SETUP,
        "engine.backend=server",
        f"engine.url={server.url}",
        f"output_root={out}",
        "max_samples=24",
        "chunk_size=2",
        "engine.max_concurrency=2",
        "engine.retries=1",
        SHORT,
        "tracking=off",
    ]
    job = LiveJob.generate(args, env={"OPENAI_API_KEY": KEY})
    job.wait_for("chunk 0 written", timeout=300)
    job.signal_group(signal.SIGTERM)
    assert job.wait(timeout=120) == 143, job.output[-3000:]
    assert "stopped by SIGTERM after" in job.output, job.output[-3000:]
    assert_one_line_stop(job.output)
    folder = run_folder(out)
    stopped = {p.name: p.read_bytes() for p in (folder / "data").rglob("*.parquet")}
    assert all(pq.read_table(p).num_rows == 2 for p in (folder / "data").rglob("*.parquet")) and len(stopped) < 6

    resumed = LiveJob.generate(args, env={"OPENAI_API_KEY": KEY})
    resumed.wait_for("written: 2 rows (1 of ", timeout=300)  # its own first chunk
    server.kill()
    code = resumed.wait(timeout=120)
    assert code == 1, resumed.output[-3000:]
    assert f"engine.url={server.url} stopped answering" in resumed.output
    assert "rerun the same command" in resumed.output
    kept = {p.name: p.read_bytes() for p in (folder / "data").rglob("*.parquet")}
    assert len(stopped) < len(kept) < 12, "the chunks finished before the kill are on disk, the rest are not"
    assert not (folder / "done" / "shard-00000-of-00001").exists(), "the shard is not marked done"

    server.serve()
    rerun = LiveJob.generate(args, env={"OPENAI_API_KEY": KEY})
    assert rerun.wait(timeout=600) == 0, rerun.output[-3000:]
    rows = rows_by_id(out)
    assert len(rows) == 24 and all(r["status"] == "ok" for r in rows.values())
    # The chunks written before the SIGTERM and the kill were not written again.
    for path in (folder / "data").rglob("*.parquet"):
        if path.name in kept:
            assert path.read_bytes() == kept[path.name], path.name
    assert stopped.items() <= kept.items()


def test_serve_job_answers_dynamos_chat_request_and_sigterm_leaves_nothing(server: Server) -> None:
    """Last in the module: jobs/serve.py (the fault test started it), stopped by SIGTERM."""
    job = server.serve()
    url, key = server.url, KEY
    group = None
    try:
        assert f" at {url} (pid " in job.output
        [process] = [p for p in psutil.Process(job.process.pid).children() if "api_server" in " ".join(p.cmdline())]
        group = os.getpgid(process.pid)
        assert group != os.getpgid(job.process.pid)
        members = child_server._group_members(group)
        assert len(members) >= 2  # the API server and vLLM's engine core
        # The key reaches the server through its environment only: in no command line, in nothing printed.
        assert not [p for p in [*members, psutil.Process(job.process.pid)] if key in "\0".join(p.cmdline())]
        # vLLM's IPC sockets are in the server's own folder, removed with it (not named by UUID in /tmp).
        ipc = Path(process.environ()["VLLM_RPC_BASE_PATH"])
        assert ipc.name.startswith(reaper.IPC_PREFIX) and any(ipc.iterdir())
        assert key not in job.output and '"Authorization: Bearer $OPENAI_API_KEY"' in job.output
        assert "jobs/generate.py spec=ngram" in job.output and "engine.backend=server" in job.output

        model = compose_job([]).model.path
        with httpx.Client(trust_env=False, timeout=300) as client:
            assert client.get(f"{url}/models").status_code == 401  # the server wants the key the job sends
            answer = client.post(
                f"{url}/chat/completions",
                headers={"Authorization": f"Bearer {key}"},
                json={"model": model, "messages": [{"role": "user", "content": SAKURA_PROMPT}], "max_tokens": 250},
            )
            assert answer.status_code == 200, answer.text
            body = answer.json()
            assert body["choices"][0]["message"]["content"].strip()
            assert 0 < body["usage"]["completion_tokens"] <= SAKURA_MAX_TOKENS
            # --per-request-spec-decode-metrics summary: the response carries the request's own figures.
            assert body["metrics"]["speculative_decoding"]["num_spec_tokens"] == 3
            metrics = client.get(url.removesuffix("/v1") + "/metrics").text
        assert "vllm:spec_decode_num_drafts_total" in metrics

        job.process.send_signal(signal.SIGTERM)
        stopped = time.monotonic()
        assert job.wait(timeout=30) == 0
        assert wait_group_gone(group, timeout=max(0.0, 30 - (time.monotonic() - stopped))) == []
        assert not ipc.exists()
        # Dead, at most a zombie waiting for an init that reaps (not every container's init does).
        assert not [p for p in members if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    finally:
        if job.process.poll() is None:
            job.process.kill()
            job.wait(timeout=30)
        if group is not None and child_server._group_members(group):
            os.killpg(group, signal.SIGKILL)
