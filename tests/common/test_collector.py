"""Python's garbage collector paused while a job starts (specbatch.common.collector): the job turns it back on once
its engine is up, and leaves a collector it did not pause as it was."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from conftest import compose_job, fake_engine
from specbatch.auto import engines as auto_engines
from specbatch.backends.dummy.dummy import DummyEngine
from specbatch.common.collector import pause_for_start, resume_after_start
from specbatch.pipeline import run_job


@pytest.fixture(autouse=True)
def collector_restored() -> Iterator[None]:
    was = gc.isenabled()
    try:
        yield
    finally:
        resume_after_start()  # nothing left paused for the next test
        (gc.enable if was else gc.disable)()


def test_paused_until_resumed_and_a_collector_off_before_stays_off() -> None:
    pause_for_start()
    assert not gc.isenabled()
    resume_after_start()
    assert gc.isenabled()
    resume_after_start()  # twice: still on, nothing else changes
    assert gc.isenabled()
    gc.disable()  # someone else's choice (not a pause): resuming does not override it
    pause_for_start()
    resume_after_start()
    assert not gc.isenabled()


def test_a_job_paused_at_start_collects_again_once_its_engine_is_up(local_job_factory) -> None:
    job = local_job_factory("engine.backend=dummy", "tracking=off", rows=3)
    engine = fake_engine(job)
    during: list[bool] = []
    add = engine.add

    def add_and_look(*args, **kwargs):
        during.append(gc.isenabled())
        return add(*args, **kwargs)

    engine.add = add_and_look
    pause_for_start()  # as jobs/generate.py does
    result = run_job(job, engine=engine)
    assert result.generated and len(result.parquet_files) == 2
    assert during == [True] * 3, "every row was generated with the collector on"


def test_a_spec_auto_shard_starts_every_engine_paused_and_generates_with_the_collector_on(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """spec=auto starts its engines phase by phase: the first is the job's start (paused since launch), and a
    switch's start makes as many long-lived objects. Before, the shard resumed collection before any engine was up."""
    at_start: list[bool] = []
    during: list[bool] = []
    real_start, real_add = auto_engines.start_engine, DummyEngine.add

    def start(job):
        at_start.append(gc.isenabled())
        return real_start(job)

    def add(self, request):
        during.append(gc.isenabled())
        return real_add(self, request)

    monkeypatch.setattr(auto_engines, "start_engine", start)
    monkeypatch.setattr(DummyEngine, "add", add)
    job = compose_job(
        [
            f"output_root={tmp_path}",
            "engine.backend=dummy",
            "tracking=off",
            "max_samples=40",
            "spec=auto",
            "spec.auto.candidates=[none,ngram-k2,suffix-k5]",
            "spec.auto.pilot=ngram-k2",
            "spec.auto.slice_rows=2",
            "spec.auto.budget=0.5",
            "spec.auto.always_measure=true",
            "chunk_size=8",
        ]
    )
    pause_for_start()  # as jobs/generate.py does
    result = run_job(job)
    assert result.generated and len(during) == 40
    assert len(at_start) >= 2, "the pilot's engine and suffix's own were started"
    assert at_start == [False] * len(at_start), "every engine started with the collector paused"
    assert all(during), "every row was generated with the collector on"
    assert gc.isenabled()
