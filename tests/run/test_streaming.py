"""The streaming loop with the dummy engine (logic only): rows isolated from each other's failures, turns chained,
chunks finished out of order, memory-bounded admission, SIGTERM-style stops."""

from __future__ import annotations

import pytest

from specbatch.backends.dummy.dummy import DummyEngine
from specbatch.data.prompts import load_tokenizer
from specbatch.data.rows import SourceRow
from specbatch.engine import Completion, Request, engine_fingerprint
from specbatch.engine.spec_metrics import Counters
from specbatch.run.streaming import ChunkResult, ChunkStreamer


@pytest.fixture
def setup(job_factory):
    job = job_factory("spec=ngram", "dataset=local", "dataset.path=x.jsonl", "dataset.prompt_format=turns")
    return job, load_tokenizer(job.model)


def refuse_poison(request: Request) -> str | None:
    return "token id out of range" if request.row_id == "r2" else None


def rows() -> list[SourceRow]:
    return [
        SourceRow("r1", "a", turns=["hello", "again"]),
        SourceRow("r2", "b", turns=["refused by the engine", "never asked"]),
        SourceRow("r3", "a", turns=["fine"]),
        SourceRow("r5", "b", turns=["x " * 3000, "second", "third"]),
        SourceRow("r4", None, error="line 9 is not a JSON object"),
    ]


def stream(engine: DummyEngine, job, tokenizer, chunks, **kwargs) -> tuple[list[ChunkResult], object]:
    written: list[ChunkResult] = []
    result = ChunkStreamer(engine, job, tokenizer).run(chunks, written.append, **kwargs)
    return written, result


def test_a_failing_row_is_isolated_and_its_later_turns_are_errors(setup) -> None:
    job, tokenizer = setup
    engine = DummyEngine(engine_fingerprint(job), k=job.spec.k, refuse=refuse_poison, keep_requests=True)
    [chunk], result = stream(engine, job, tokenizer, [(0, rows())])
    got = {(r["row_id"], r["turn"]): (r["status"], r["error"]) for r in chunk.output_rows}
    assert got[("r1", 1)] == ("ok", None) and got[("r1", 2)] == ("ok", None) and got[("r3", 1)] == ("ok", None)
    assert got[("r2", 1)] == ("error", "refused by the engine: token id out of range")
    assert got[("r2", 2)] == ("error", f"turn 1 failed: {got[('r2', 1)][1]}")
    assert got[("r4", 1)] == ("error", "line 9 is not a JSON object")
    # Too long at turn 1: never sent, and every later turn says which turn failed and why.
    assert got[("r5", 1)][0] == "error" and got[("r5", 1)][1].startswith("prompt too long")
    assert got[("r5", 3)] == ("error", f"turn 1 failed: {got[('r5', 1)][1]}")
    # Records in row order, then turn: the part reads like the data file whatever order requests finished in.
    assert [(r["row_id"], r["turn"]) for r in chunk.output_rows] == [
        ("r1", 1), ("r1", 2), ("r2", 1), ("r2", 2), ("r3", 1), ("r5", 1), ("r5", 2), ("r5", 3), ("r4", 1)
    ]  # fmt: skip
    # Turn 2 only for the row still alive, asked with r1's own turn-1 answer in the conversation.
    assert [(r.row_id, r.turn) for r in engine.added] == [("r1", 1), ("r3", 1), ("r1", 2)]
    first_answer = next(r["completion"] for r in chunk.output_rows if r["row_id"] == "r1" and r["turn"] == 1)
    r1_turn2 = next(r for r in chunk.output_rows if r["row_id"] == "r1" and r["turn"] == 2)
    assert first_answer in r1_turn2["prompt"]
    # The chunk's figures are its requests' own; over one chunk they equal the engine counter differences.
    assert chunk.counters == result.counters and chunk.counters.generation_tokens > 0
    generated = sum(r["completion_tokens"] for r in chunk.output_rows if r["status"] == "ok")
    assert chunk.counters.generation_tokens == generated
    assert chunk.counters.drafts == sum(r["spec_steps"] for r in chunk.output_rows if r["status"] == "ok")


def test_chunks_are_written_as_they_finish_and_the_engine_is_never_drained(setup) -> None:
    job, tokenizer = setup
    # Chunk 0 holds one long row, chunk 1 short ones: chunk 1 finishes first, and chunk 1's rows were asked while
    # chunk 0 was still running (no drain at the chunk boundary).
    long_row, short_rows = (
        SourceRow("long", None, turns=["a"]),
        [SourceRow(f"s{i}", None, turns=["b"]) for i in range(3)],
    )
    engine = DummyEngine(
        engine_fingerprint(job),
        concurrency=4,
        length=lambda request: 40 if request.row_id == "long" else 2,
        keep_requests=True,
    )
    written, result = stream(engine, job, tokenizer, [(0, [long_row]), (1, short_rows)])
    assert [c.number for c in written] == [1, 0] and result.chunks == [1, 0]
    assert written[0].elapsed <= written[1].elapsed <= result.seconds
    assert [r.row_id for r in engine.added] == ["long", "s0", "s1", "s2"]


@pytest.mark.parametrize("end", ["stop_requested", "until"])
def test_admission_is_bounded_and_a_stop_finishes_what_was_admitted(setup, end: str) -> None:
    job, tokenizer = setup
    engine = DummyEngine(engine_fingerprint(job), concurrency=2)
    admitted: list[int] = []

    def chunks():
        for n in range(100):
            admitted.append(n)
            yield n, [SourceRow(f"c{n}r{i}", None, turns=["q"]) for i in range(2)]

    # Stop after the engine has answered 6 requests: what was admitted by then is finished, nothing more. A stop
    # signal and until() (a hand-over to another set-up, spec=auto's) end admission alike; the result says which.
    ending = {"stop_requested": "stopped", "until": "handed_over"}[end]
    written, result = stream(engine, job, tokenizer, chunks(), **{end: lambda: engine.completed >= 6})
    assert getattr(result, ending) and not getattr(result, ({"stopped", "handed_over"} - {ending}).pop())
    assert sorted(result.chunks) == admitted == list(range(len(admitted)))
    assert len(admitted) < 10  # a bounded look-ahead, not the whole generator
    assert all(len(c.output_rows) == 2 for c in written)


def test_while_until_is_undecided_the_engine_is_kept_full_and_nothing_is_queued_ahead(setup) -> None:
    """spec=auto's lead stream: until() answers None until its decision; meanwhile only the engine's batch is in
    (fewer rows committed to the set-up it may hand over from), then the usual look-ahead of twice the batch."""
    job, tokenizer = setup
    engine = DummyEngine(engine_fingerprint(job), concurrency=2)
    answer: list[bool | None] = [None]
    peak = {None: 0, False: 0}
    real_add = engine.add

    def add(request: Request) -> None:
        real_add(request)
        peak[answer[0]] = max(peak[answer[0]], engine.unfinished)

    def until() -> bool | None:
        if engine.completed >= 6:
            answer[0] = False
        return answer[0]

    engine.add = add  # type: ignore[method-assign]
    chunks = ((n, [SourceRow(f"c{n}r0", None, turns=["q"])]) for n in range(20))
    written, result = stream(engine, job, tokenizer, chunks, until=until)
    assert peak == {None: 2, False: 4}
    assert len(written) == 20 and not result.handed_over and not result.stopped


def test_an_engine_failure_cancels_what_is_in_flight(setup) -> None:
    job, tokenizer = setup
    engine = DummyEngine(engine_fingerprint(job), concurrency=1, length=2, die_after=1)
    with pytest.raises(KeyboardInterrupt):
        stream(engine, job, tokenizer, [(0, [SourceRow("a", None, turns=["q"]), SourceRow("b", None, turns=["q"])])])
    assert engine.unfinished == 0  # a shared engine starts the next job empty


class AnswersWithAnError(DummyEngine):
    """An engine that gives up on one request alone (a server's error answer after its retries)."""

    def step(self) -> list[Completion]:
        return [
            Completion(c.request, [], c.seconds, error="the server answered HTTP 500: boom")
            if c.request.row_id == "r1" and c.request.turn == 1
            else c
            for c in super().step()
        ]


def test_a_request_the_engine_gave_up_on_is_an_error_row_and_its_later_turns_too(setup) -> None:
    job, tokenizer = setup
    engine = AnswersWithAnError(engine_fingerprint(job), k=job.spec.k)
    [chunk], _ = stream(engine, job, tokenizer, [(0, rows()[:3])])
    got = {(r["row_id"], r["turn"]): (r["status"], r["error"]) for r in chunk.output_rows}
    assert got[("r1", 1)] == ("error", "the server answered HTTP 500: boom")
    assert got[("r1", 2)] == ("error", "turn 1 failed: the server answered HTTP 500: boom")
    assert got[("r3", 1)] == ("ok", None)
    # The failed request's prompt is kept on its error row, so the row shows what was asked.
    assert next(r for r in chunk.output_rows if r["row_id"] == "r1")["prompt"]


def test_counters_that_went_backwards_are_not_used(setup) -> None:
    """A server restarted during the loop starts its counters again from 0: their difference means nothing."""
    job, tokenizer = setup
    engine = DummyEngine(engine_fingerprint(job), k=job.spec.k)
    snapshots = iter([Counters(drafts=900, draft_tokens=2700, accepted_tokens=800), Counters(drafts=5)])
    engine.counters = lambda: next(snapshots)  # type: ignore[method-assign]
    [chunk], result = stream(engine, job, tokenizer, [(0, rows()[2:3])])
    assert result.counters is None and chunk.counters.drafts > 0


def test_a_row_too_big_to_fit_is_an_error_row_and_is_never_tokenized(setup, monkeypatch) -> None:
    job, tokenizer = setup
    huge = "w" * (job.model.max_model_len * 4096)  # more characters than any tokenizer's tokens could cover
    tokenized: list[int] = []
    real_call = type(tokenizer).__call__
    monkeypatch.setattr(
        type(tokenizer),
        "__call__",
        lambda self, text, *a, **k: (tokenized.append(len(text)), real_call(self, text, *a, **k))[1],
    )
    engine = DummyEngine(engine_fingerprint(job), k=job.spec.k, keep_requests=True)
    [chunk], _ = stream(engine, job, tokenizer, [(0, [SourceRow("big", turns=[huge, "next"]), *rows()[:1]])])
    got = {(r["row_id"], r["turn"]): (r["status"], r["error"]) for r in chunk.output_rows}
    assert got[("big", 1)][0] == "error" and "characters cannot fit model.max_model_len" in got[("big", 1)][1]
    assert got[("big", 2)][1].startswith("turn 1 failed: prompt too long")
    assert got[("r1", 1)] == ("ok", None)
    assert max(tokenized) < len(huge), "the huge row was tokenized"
