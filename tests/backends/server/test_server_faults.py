"""The server backend against a misbehaving OpenAI-compatible server (a real HTTP server on loopback, no model):
malformed answers are error rows naming what was wrong, a server at fault stops the shard without closing it, and a
server serving another model is refused before anything is written."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from conftest import compose_job
from specbatch.config import ConfigError
from specbatch.engine import EngineUnavailable, Request, start_engine
from specbatch.pipeline import merge_run, run_job

# What the fake server answers to one /v1/completions request: (HTTP status, content type, body).
Answer = tuple[int, str, bytes]
PROBE = [1, 2, 3, 4]  # the start-up check's prompt (specbatch.backends.server.server._PROBE_PROMPT)


def completion(choices: list[dict[str, Any]], **extra: Any) -> Answer:
    body = {"id": "cmpl-1", "object": "text_completion", "created": 0, "model": "m", "choices": choices, **extra}
    return 200, "application/json", json.dumps(body).encode()


def choice(text: Any = " ok", token_ids: Any = (11, 12)) -> dict[str, Any]:
    return {"index": 0, "text": text, "finish_reason": "length", "logprobs": None, "token_ids": list(token_ids)}


GOOD = completion([choice()])
# Each malformed answer, and what its error row must say.
MALFORMED: dict[str, tuple[Answer, str]] = {
    "html": ((200, "text/html", b"<html><body>502 Bad Gateway</body></html>"), "no choices in it ('<html>"),
    "not json": ((200, "application/json", b"{not json"), "malformed answer from the server: Expecting"),
    "no choices": (
        (200, "application/json", json.dumps({"id": "x", "object": "text_completion"}).encode()),
        "no choices in it",
    ),
    "empty choices": (completion([]), "0 choices for sampling.n=1"),
    "two choices": (completion([choice(), choice()]), "2 choices for sampling.n=1"),
    "null text": (completion([choice(text=None)]), "choice 0 has no text (None)"),
    "string token ids": (completion([choice(token_ids=["a", "b"])]), "token_ids are not a list of integers"),
    "garbage metrics": (
        completion([choice()], metrics={"speculative_decoding": {"num_spec_steps": "many"}}),
        "metrics.speculative_decoding is not what vLLM sends",
    ),
}


class FakeServer:
    """An OpenAI-compatible server on 127.0.0.1 in a thread. ``answer(n)`` decides the n-th completion request's
    answer (the start-up probe always gets a good one); ``models`` is what /v1/models lists."""

    def __init__(self, answer: Callable[[int], Answer], models: list[dict[str, str]]) -> None:
        self.answer, self.models, self.asked = answer, models, 0
        lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _send(self, status: int, kind: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if self.path == "/v1/models":
                    data = [{"object": "model", "created": 0, "owned_by": "fake", **m} for m in fake.models]
                    self._send(200, "application/json", json.dumps({"object": "list", "data": data}).encode())
                else:
                    self._send(404, "text/plain", b"not here")

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if body.get("prompt") == PROBE:
                    self._send(*GOOD)
                    return
                with lock:
                    n, fake.asked = fake.asked, fake.asked + 1
                self._send(*fake.answer(n))

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., FakeServer]]:
    started: list[FakeServer] = []

    def start(answer: Callable[[int], Answer], models: list[dict[str, str]] | None = None) -> FakeServer:
        model = compose_job([]).model.path
        server = FakeServer(answer, models if models is not None else [{"id": model, "root": model}])
        started.append(server)
        return server

    yield start
    for server in started:
        server.close()


def job_for(server: FakeServer, tmp_path: Path, rows: int, *extra: str) -> Any:
    return compose_job(["spec=none", *job_overrides(server, tmp_path, rows), *extra])


def job_overrides(server: FakeServer, tmp_path: Path, rows: int) -> list[str]:
    return [
        "engine.backend=server",
        f"engine.url={server.url}",
        "engine.retries=0",
        "engine.warmup=false",
        "engine.max_concurrency=1",  # one request at a time: the n-th request is the n-th row
        f"max_samples={rows}",
        f"chunk_size={rows}",
        "tracking=off",
        f"output_root={tmp_path}",
    ]


def test_each_malformed_answer_is_one_error_row_naming_what_was_wrong(serve, tmp_path: Path) -> None:
    kinds = list(MALFORMED)
    server = serve(lambda n: GOOD if n == 0 else MALFORMED[kinds[n - 1]][0])
    result = run_job(job_for(server, tmp_path, 1 + len(kinds)))
    rows = pq.read_table(result.parquet_files).to_pylist()
    assert len(rows) == 1 + len(kinds), "exactly one record per row: never two, never none"
    assert rows[0]["status"] == "ok" and rows[0]["completion"] == " ok"
    for kind, row in zip(kinds, rows[1:], strict=True):
        assert row["status"] == "error" and MALFORMED[kind][1] in row["error"], (kind, row["error"])
    assert result.summary.rows == 1 + len(kinds) and result.folder.done_marker.exists()


@pytest.mark.parametrize(
    ("fault", "said"),
    [("503", "the server answered HTTP 503"), ("500", "the server answered HTTP 500"), ("hang", "no answer within")],
)
def test_a_server_at_fault_stops_the_shard_and_the_rerun_generates_every_row(
    serve, tmp_path: Path, fault: str, said: str
) -> None:
    broken = threading.Event()
    broken.set()
    gave_up = threading.Event()

    def answer(n: int) -> Answer:
        if n < 2 or not broken.is_set():
            return GOOD
        if fault == "hang":
            gave_up.wait(60)  # past engine.request_timeout_seconds, until the job has given up
            return GOOD
        return int(fault), "application/json", json.dumps({"error": {"message": "upstream is down"}}).encode()

    server = serve(answer)
    # A timeout the good answers meet on a loaded machine too: with 1 s, a first answer that came late (the
    # client's first connection) timed out, and the shard stopped before chunk 0 was whole.
    job = job_for(server, tmp_path, 6, "chunk_size=2", "engine.request_timeout_seconds=5")
    stopped = f"stopped answering properly \\({said}.*for row \\S*2;.*rerun the same"  # the third row, not before
    with pytest.raises(EngineUnavailable, match=stopped):
        run_job(job)
    gave_up.set()
    from specbatch.run.folder import RunFolder

    layout = RunFolder.for_job(job)
    parts = sorted(layout.data_dir.glob("part-*.parquet"))
    assert [p.name for p in parts] == ["part-00000.parquet"], "the chunk answered before the fault is kept"
    assert not layout.done_marker.exists(), "rows the server failed are not error rows closing the shard"
    broken.clear()
    rerun = run_job(job)
    rows = pq.read_table(sorted(layout.data_dir.glob("part-*.parquet"))).to_pylist()
    assert len(rows) == 6 and all(r["status"] == "ok" for r in rows) and rerun.folder.done_marker.exists()


def test_an_answer_that_finished_before_a_failure_is_handed_back_before_the_failure(serve, tmp_path: Path) -> None:
    # Both requests finished before the job asked the engine for a step (a slow machine, a fast 503): the good
    # answer still comes back first, so its chunk is written, and the failure at the next step. (Both in one step
    # raised, and the finished answer was lost with it.)
    server = serve(lambda n: GOOD if n == 0 else (503, "application/json", b'{"error": {"message": "down"}}'))
    job = job_for(server, tmp_path, 2, "engine.max_concurrency=2")
    engine = start_engine(job)
    try:
        for row in ("a", "b"):
            engine.add(Request(row, 1, [5, 6, 7], job.sampling))
        deadline = time.monotonic() + 60
        while engine._finished.qsize() < 2:  # both answered, before the first step
            assert time.monotonic() < deadline, "the fake server did not answer both requests"
            time.sleep(0.01)
        # Whichever of the two the server took first (they were sent together).
        [first] = engine.step()
        assert first.request.row_id in ("a", "b") and first.error is None
        with pytest.raises(EngineUnavailable, match="HTTP 503"):
            engine.step()
    finally:
        engine.close()


def test_a_row_the_server_refuses_is_an_error_row_and_the_shard_finishes(serve, tmp_path: Path) -> None:
    refused = 400, "application/json", json.dumps({"error": {"message": "prompt too long"}}).encode()
    server = serve(lambda n: refused if n == 1 else GOOD)
    result = run_job(job_for(server, tmp_path, 3))
    rows = pq.read_table(result.parquet_files).to_pylist()
    assert [r["status"] for r in rows] == ["ok", "error", "ok"] and "HTTP 400: prompt too long" in rows[1]["error"]
    assert result.folder.done_marker.exists()


def test_a_server_serving_another_model_is_refused_before_anything_is_written(serve, tmp_path: Path) -> None:
    server = serve(lambda n: GOOD, models=[{"id": "other-org/other-model", "root": "/models/other-model"}])
    with pytest.raises(ConfigError, match=r"serves other-org/other-model \(from /models/other-model\), not this job"):
        run_job(job_for(server, tmp_path, 2))
    assert not (tmp_path / "runs").exists()
    # The same model under another name, said so by the user: accepted.
    result = run_job(job_for(server, tmp_path, 2, "engine.served_model=other-org/other-model"))
    assert result.summary.rows == 2


def spec_figures(steps: int, drafted: int, accepted: int) -> dict[str, Any]:
    return {
        "speculative_decoding": {
            "num_spec_steps": steps,
            "num_draft_tokens": drafted,
            "num_accepted_draft_tokens": accepted,
            "acceptance_histogram": [steps - 1, 1],
        }
    }


@pytest.mark.parametrize(
    ("metrics", "warning"),
    [
        ({}, "the server reported no drafting at all: it does not speculate"),
        (spec_figures(1, 3, 5), "the server counted 10 accepted of 6 drafted tokens"),
    ],
)
def test_a_server_that_does_not_speculate_or_miscounts_gives_unknown_acceptance(
    serve, tmp_path: Path, caplog: pytest.LogCaptureFixture, metrics: dict[str, Any], warning: str
) -> None:
    # spec=ngram asked of a server started without it (or reporting nonsense): not AL 1.0, acceptance 0.0.
    server = serve(lambda n: completion([choice()], **({"metrics": metrics} if metrics else {})))
    job = compose_job(["spec=ngram", *job_overrides(server, tmp_path, 2)])
    with caplog.at_level("WARNING"):
        result = run_job(job)
    summary = result.summary
    assert summary.mean_acceptance_length is None and summary.draft_acceptance_rate is None
    assert summary.accepted_tokens is None and summary.output_tokens == 4
    assert warning in caplog.text and "acceptance figures of spec.method=ngram left unknown" in caplog.text
    # Nothing built from the same figures takes them after all: no profile (the miscounting rows have histograms),
    # and the merge keeps them unknown rather than adding the refused shard up as zero acceptance.
    assert not result.folder.profile_path.exists()
    merged = merge_run(result.folder.root).summary
    assert merged.mean_acceptance_length is None and merged.accepted_tokens is None
    assert merged.acceptance_doubt == summary.acceptance_doubt and warning in merged.acceptance_doubt
    assert not result.folder.merged_profile_path.exists()
