"""The vLLM backend streamed for real (embedded SmolLM2, float32, greedy): chunks and turns overlap in one engine and
change nothing in the completions; the figures of the parts add up to the engine's own counters."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import compose_job
from specbatch.engine import Engine, Request, RequestRefused, start_engine
from specbatch.engine.spec_metrics import Counters, accepted_per_position_from_histogram
from specbatch.pipeline import run_job
from specbatch.run.folder import RunFolder

pytestmark = pytest.mark.slow

ROWS = 6
FIRST_TURNS = [
    "Write a Python function that reverses a string.",
    "List three prime numbers.",
    "Say hello in French.",
    "Write a Python function that adds two numbers.",
    "What is 2 + 2?",
    "Name a colour.",
]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("data") / "two-turns.jsonl"
    rows = [{"id": f"q{i}", "turns": [text, "Now say it again, shorter."]} for i, text in enumerate(FIRST_TURNS)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def overrides(data: Path, root: Path, *extra: str) -> list[str]:
    return [
        "spec=ngram",
        "model.dtype=float32",
        "dataset=local",
        f"dataset.path={data}",
        "dataset.prompt_format=turns",
        "dataset.turns_column=turns",
        "dataset.id_column=id",
        f"max_samples={ROWS}",
        "sampling.max_tokens=40",
        "tracking=off",
        f"output_root={root}",
        *extra,
    ]


@pytest.fixture(scope="module")
def engine(data: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    engine = start_engine(compose_job(overrides(data, tmp_path_factory.mktemp("unused"))))
    yield engine
    engine.close()


def rows_of(layout: RunFolder) -> list[dict]:
    return [r for p in sorted(layout.data_dir.glob("part-*.parquet")) for r in pq.read_table(p).to_pylist()]


def test_three_chunks_and_two_turns_streamed_equal_one_chunk(engine: Engine, data: Path, tmp_path: Path) -> None:
    streamed = run_job(compose_job(overrides(data, tmp_path, "chunk_size=2")), engine=engine)
    whole = run_job(compose_job(overrides(data, tmp_path, "chunk_size=6")), engine=engine)
    assert [p.name for p in streamed.parquet_files] == [
        "part-00000.parquet",
        "part-00001.parquet",
        "part-00002.parquet",
    ]
    got, want = rows_of(streamed.folder), rows_of(whole.folder)
    # Every row and turn exactly once, in data order inside each part, all generated.
    keys = [(r["row_id"], r["turn"]) for r in got]
    assert keys == [(f"q{i}", t) for i in range(ROWS) for t in (1, 2)]
    assert all(r["status"] == "ok" for r in got)
    # Float32 greedy: the stream (chunks and turns overlapping in the engine) changes no token.
    assert [r["completion_token_ids"] for r in got] == [r["completion_token_ids"] for r in want]
    assert [r["prompt"] for r in got] == [r["prompt"] for r in want]  # turn 2 carries the model's own turn-1 answer
    assert sum(r["accepted_tokens"] for r in got) > 0

    # The shard's figures are the engine's counter differences over the loop; the rows' own figures add up to them.
    summary, layout = streamed.summary, streamed.folder
    assert summary.concurrency == engine.concurrency and summary.generation_seconds > 0
    assert summary.output_tokens == sum(r["completion_tokens"] for r in got)
    assert summary.prompt_tokens == sum(r["prompt_tokens"] for r in got)
    assert summary.drafts == sum(r["spec_steps"] for r in got)
    assert summary.draft_tokens == sum(r["draft_tokens"] for r in got)
    assert summary.accepted_tokens == sum(r["accepted_tokens"] for r in got)
    per_position = [
        sum(column)
        for column in zip(*(accepted_per_position_from_histogram(r["acceptance_histogram"]) for r in got), strict=True)
    ]
    assert summary.accepted_per_position == per_position
    # ... and so do the per-chunk figures, from the rows of each chunk, stored beside each part.
    [record] = [json.loads(p.read_text()) for p in layout.part_stats_path(0).parent.glob("launch-*.json")]
    assert sorted(record["parts"]) == [0, 1, 2]
    chunk_sum = Counters()
    for number in range(3):
        c = json.loads(layout.part_stats_path(number).read_text())["counters"]
        chunk_sum = chunk_sum + Counters.from_dict(c)
    assert chunk_sum == Counters.from_dict(record["counters"])
    assert summary.generation_seconds == pytest.approx(record["seconds"])


def test_a_request_vllm_refuses_fails_alone(engine: Engine, data: Path, tmp_path: Path) -> None:
    job = compose_job(overrides(data, tmp_path))
    with pytest.raises(RequestRefused):
        engine.add(Request("bad", 1, [10**9], job.sampling))  # a token id far outside the vocabulary
    assert engine.unfinished == 0
    engine.add(Request("good", 1, [1, 2, 3, 4], job.sampling))
    done = []
    while engine.unfinished:
        done += engine.step()
    assert [c.request.row_id for c in done] == ["good"] and done[0].samples[0].token_ids
