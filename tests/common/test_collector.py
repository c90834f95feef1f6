"""Python's garbage collector paused while a job starts (specbatch.common.collector): the job turns it back on once
its engine is up, and leaves a collector it did not pause as it was."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from conftest import fake_engine
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
