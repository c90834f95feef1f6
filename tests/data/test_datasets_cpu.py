"""Data sets of every shape through the real job code with one shared vLLM engine (embedded model, CPU).

Each test writes its own small file, runs ``run_job`` with the module's engine (jobs differ only in their data),
and reads the Parquet back: formats, chat messages, multi-turn ordering, error rows, per-category figures.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from mlflow.tracking import MlflowClient
from test_data import ROWS, write

from conftest import compose_job, run_generate
from specbatch.engine import Engine, start_engine
from specbatch.pipeline import run_job

pytestmark = pytest.mark.slow

COMMON = ["model.dtype=float32", "sampling.max_tokens=24", "dataset=local"]
# For the jobs whose test does not read MLflow: each job's fresh tmp_path would otherwise create and migrate a
# SQLite store of its own and log a run to it (seconds a job, for nothing asserted).
NO_MLFLOW = "tracking=off"


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    job = compose_job([*COMMON, "dataset.path=unused.jsonl", "dataset.template='{q}'"])
    engine = start_engine(job)
    yield engine
    engine.close()


def run(engine: Engine, tmp_path: Path, path: str, *extra: str):
    job = compose_job([*COMMON, f"output_root={tmp_path / 'out'}", f"dataset.path={path}", *extra])
    result = run_job(job, engine=engine)
    rows = pq.read_table(result.parquet_files[0]).to_pylist()
    return result.summary, rows


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".csv", ".parquet"])
def test_each_format_generates_every_row(engine: Engine, tmp_path: Path, suffix: str) -> None:
    path = write(tmp_path / f"data{suffix}", ROWS)
    summary, rows = run(
        engine,
        tmp_path,
        path,
        "dataset.template='{question}'",
        "dataset.id_column=id",
        "dataset.category_column=topic",
        NO_MLFLOW,
    )
    assert [(r["row_id"], r["category"], r["status"], r["turn"]) for r in rows] == [
        ("a", "math", "ok", 1),
        ("b", "general", "ok", 1),
        ("c", "math", "ok", 1),
    ]
    assert all(r["completion_tokens"] > 0 for r in rows)
    assert summary.rows == 3 and summary.error_rows == 0
    assert set(summary.per_category) == {"math", "general"} and summary.per_category["math"]["rows"] == 2


def test_messages_rows_keep_their_system_prompt(engine: Engine, tmp_path: Path) -> None:
    chats = [
        {"messages": [{"role": "system", "content": "You answer in French."}, {"role": "user", "content": "Hello!"}]},
        {"messages": [{"role": "user", "content": "Say yes."}]},
    ]
    path = write(tmp_path / "chats.jsonl", chats)
    summary, rows = run(engine, tmp_path, path, "dataset.prompt_format=messages", NO_MLFLOW)
    assert [r["status"] for r in rows] == ["ok", "ok"]
    assert rows[0]["prompt"].startswith("<|im_start|>system\nYou answer in French.<|im_end|>")
    # No system message in the row: the chat template's default one is used.
    assert "You are a helpful AI assistant named SmolLM" in rows[1]["prompt"]


def test_multi_turn_answers_feed_the_next_turn_and_categories_add_up(engine: Engine, tmp_path: Path) -> None:
    data = [
        {"qid": 1, "category": "writing", "turns": ["Write one line about the sea.", "Now make it rhyme."]},
        {"qid": 2, "category": "math", "turns": ["What is 12 + 30?", "Double it.", "Now halve that."]},
        {"qid": 3, "category": "math", "turns": ["Is 7 prime?"]},
    ]
    summary, rows = run(
        engine,
        tmp_path,
        write(tmp_path / "mt.jsonl", data),
        "dataset.prompt_format=turns",
        "dataset.id_column=qid",
        "dataset.category_column=category",
        "tracking.experiment=multi_turn",
    )
    assert all(r["status"] == "ok" for r in rows)
    by_turn = {(r["row_id"], r["turn"]): r for r in rows}
    assert sorted(by_turn) == [("1", 1), ("1", 2), ("2", 1), ("2", 2), ("2", 3), ("3", 1)]
    # Each row's turns together, in data order (they were generated as each previous turn finished).
    assert [(r["row_id"], r["turn"]) for r in rows] == [("1", 1), ("1", 2), ("2", 1), ("2", 2), ("2", 3), ("3", 1)]
    for row_id, turns in (("1", 2), ("2", 3)):
        for turn in range(2, turns + 1):
            prompt = by_turn[(row_id, turn)]["prompt"]
            for earlier in range(1, turn):
                assert by_turn[(row_id, earlier)]["completion"] in prompt
            assert prompt.index(data[int(row_id) - 1]["turns"][turn - 2]) < prompt.index(
                by_turn[(row_id, turn - 1)]["completion"]
            )
    cats = summary.per_category
    assert cats["math"]["rows"] == 4 and cats["writing"]["rows"] == 2
    assert sum(c["rows"] for c in cats.values()) == summary.rows == 6
    assert sum(c["output_tokens"] for c in cats.values()) == summary.output_tokens
    assert sum(c["accepted_tokens"] for c in cats.values()) == summary.accepted_tokens
    assert sum(c["drafts"] for c in cats.values()) == summary.drafts
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'out'}/mlflow.db")
    [mlrun] = client.search_runs([client.get_experiment_by_name("multi_turn").experiment_id])
    assert mlrun.data.metrics["category/math/rows"] == 4
    assert mlrun.data.metrics["category/writing/mean_acceptance_length"] == pytest.approx(
        cats["writing"]["mean_acceptance_length"]
    )


def test_bad_rows_are_recorded_and_never_sent(engine: Engine, tmp_path: Path) -> None:
    path = tmp_path / "mixed.jsonl"
    lines = [
        json.dumps({"id": "good1", "q": "Say hello.", "cat": "ok"}),
        json.dumps({"id": "empty", "q": "   ", "cat": "bad"}),
        json.dumps({"id": "long", "q": "word " * 3000, "cat": "bad"}),
        "not json at all",
        json.dumps({"id": "good2", "q": "Count to three.", "cat": "ok"}),
    ]
    path.write_text("\n".join(lines) + "\n")
    before = engine.counters()
    summary, rows = run(
        engine,
        tmp_path,
        str(path),
        "dataset.template='{q}'",
        "dataset.id_column=id",
        "dataset.category_column=cat",
        NO_MLFLOW,
    )
    sent = engine.counters() - before
    status = {r["row_id"]: (r["status"], r["error"]) for r in rows}
    assert status["good1"] == ("ok", None) and status["good2"] == ("ok", None)
    assert status["empty"] == ("error", "empty prompt")
    assert status["long"][0] == "error" and "prompt too long" in status["long"][1]
    assert "mixed.jsonl line 4 is not a JSON object" in status["3"][1]
    assert summary.rows == 5 and summary.error_rows == 3
    assert summary.per_category["bad"]["error_rows"] == 2
    error_rows = [r for r in rows if r["status"] == "error"]
    assert all(r["completion"] is None and r["completion_tokens"] is None for r in error_rows)
    # Only the good rows reached the engine (the warm-up ran before `before`).
    ok_prompt_tokens = sum(r["prompt_tokens"] for r in rows if r["status"] == "ok")
    assert sent.prompt_tokens == ok_prompt_tokens


def test_a_line_that_is_not_utf8_is_an_error_row_and_the_rest_are_generated(tmp_path: Path) -> None:
    # The whole job as users run it: one Latin-1 byte (0xE9) used to end the batch with a traceback naming no row.
    path = tmp_path / "latin.jsonl"
    path.write_bytes(
        b'{"id":"a","question":"Say hi."}\n{"id":"b","question":"caf\xe9"}\n{"id":"c","question":"Count to 3."}\n'
    )
    args = [
        f"output_root={tmp_path / 'out'}",
        "dataset=local",
        f"dataset.path={path}",
        "dataset.template='{question}'",
    ]
    # No warm-up: nothing here is timed, and the order asserted is the data's check before the engine starts.
    args += ["dataset.id_column=id", "spec=none", "sampling.max_tokens=16", "tracking=off", "engine.warmup=false"]
    result = run_generate(args, timeout=600)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    # Said before the engine starts, with the file and the line.
    assert output.index("latin.jsonl line 2") < output.index("starting vLLM")
    rows = [r for part in sorted((tmp_path / "out").rglob("part-*.parquet")) for r in pq.read_table(part).to_pylist()]
    status = {r["row_id"]: (r["status"], r["error"]) for r in rows}
    assert status["a"] == ("ok", None) and status["c"] == ("ok", None)
    assert status["1"][0] == "error" and status["1"][1].startswith("latin.jsonl line 2 is not valid UTF-8 (byte 0xe9")
