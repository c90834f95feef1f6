"""sampling.n > 1 with the dummy engine (logic only): each sample its own request and seed, every (row, turn, sample)
exactly once across a kill and a rerun, seeds that reproduce, and a summary that counts prompts and samples apart."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from conftest import fake_engine
from specbatch.backends.dummy.dummy import DummyEngine
from specbatch.config import sample_seed
from specbatch.data.prompts import load_tokenizer
from specbatch.data.rows import SourceRow
from specbatch.engine import engine_fingerprint
from specbatch.pipeline import run_job
from specbatch.run.folder import RunFolder
from specbatch.run.streaming import ChunkStreamer

N = 3


def keys(rows: list[dict]) -> list[tuple[str, int, int]]:
    return [(r["row_id"], r["turn"], r["sample_index"]) for r in rows]


def test_each_sample_is_a_request_of_its_own_and_continues_its_own_conversation(job_factory) -> None:
    job = job_factory(
        "spec=ngram", "sampling=sampled", f"sampling.n={N}", "dataset=local", "dataset.path=x.jsonl",
        "dataset.prompt_format=turns",
    )  # fmt: skip
    engine = DummyEngine(engine_fingerprint(job), k=job.spec.k, keep_requests=True)
    rows = [
        SourceRow("a", None, turns=["hello", "again"]),
        SourceRow("b", None, turns=["x " * 3000, "never asked"]),  # too long: every sample's turns are errors
    ]
    written = []
    ChunkStreamer(engine, job, load_tokenizer(job.model)).run([(0, rows)], written.append)
    [chunk] = written
    out = chunk.output_rows
    assert keys(out) == [("a", t, s) for t in (1, 2) for s in range(N)] + [
        ("b", t, s) for t in (1, 2) for s in range(N)
    ]
    # Every request asks for one sample, with the seed of its row and sample (and of the set-up).
    asked = [(r.row_id, r.turn, r.sample, r.sampling.n, r.sampling.seed) for r in engine.added]
    assert sorted(asked) == sorted(
        ("a", t, s, 1, sample_seed(job.sampling.seed, "ngram-k3", "a", s)) for t in (1, 2) for s in range(N)
    )
    assert len({seed for *_, seed in asked}) == N
    # Each sample's per-request speculative figures, and a different completion per sample.
    first = {r["sample_index"]: r for r in out if r["row_id"] == "a" and r["turn"] == 1}
    assert all(r["spec_steps"] and r["acceptance_histogram"] for r in first.values())
    assert len({tuple(r["completion_token_ids"]) for r in first.values()}) == N
    # Turn 2 of sample s carries sample s's own turn-1 answer.
    for r in out:
        if r["row_id"] == "a" and r["turn"] == 2:
            assert first[r["sample_index"]]["completion"] in r["prompt"]
            others = [first[s]["completion"] for s in first if s != r["sample_index"]]
            assert not any(o in r["prompt"] for o in others)
    errors = [r for r in out if r["row_id"] == "b"]
    assert all(r["status"] == "error" for r in errors) and {r["sample_index"] for r in errors} == set(range(N))


def test_seeds_reproduce_and_differ_by_row_sample_and_set_up() -> None:
    assert sample_seed(0, "ngram-k3", "r1", 2) == sample_seed(0, "ngram-k3", "r1", 2)
    seeds = {
        sample_seed(s, setup, row, i) for s in (0, 1) for setup in ("none", "ngram-k3") for row in "ab" for i in (0, 1)
    }
    assert len(seeds) == 16 and all(0 <= seed < 2**31 for seed in seeds)
    assert sample_seed(None, "none", "r1", 0) is None


@pytest.fixture
def sampled_job(local_job_factory):
    def make(*extra: str):
        return local_job_factory("sampling=sampled", f"sampling.n={N}", "chunk_size=2", *extra, rows=5)

    return make


def read_rows(result) -> list[dict]:
    return [r for p in result.parquet_files for r in pq.read_table(p).to_pylist()]


def test_a_killed_run_of_n_samples_resumes_to_every_row_and_sample_once(sampled_job) -> None:
    job = sampled_job()
    layout = RunFolder.for_job(job)
    # Killed after the 7th of 15 requests: chunk 0 (2 rows x 3 samples) written, chunk 1 in flight.
    with pytest.raises(KeyboardInterrupt):
        run_job(job, engine=fake_engine(job, die_after=7))
    assert [p.name for p in layout.data_dir.glob("part-*.parquet")] == ["part-00000.parquet"]
    engine = fake_engine(job)
    result = run_job(job, engine=engine)
    # Only chunks 1 and 2 were asked again, each sample once.
    assert sorted((r.row_id, r.sample) for r in engine.added) == [(f"r{i}", s) for i in range(2, 5) for s in range(N)]
    got = read_rows(result)
    assert sorted(keys(got)) == [(f"r{i}", 1, s) for i in range(5) for s in range(N)]
    assert result.summary.prompts == 5 and result.summary.rows == 5 * N

    # The same set-up elsewhere, never killed: the same samples, token for token (the seeds are the rows' own).
    again = run_job(sampled_job("run_name=again"), engine=fake_engine(job))
    tokens = {k: r["completion_token_ids"] for k, r in zip(keys(got), got, strict=True)}
    assert {
        k: r["completion_token_ids"] for k, r in zip(keys(read_rows(again)), read_rows(again), strict=True)
    } == tokens
