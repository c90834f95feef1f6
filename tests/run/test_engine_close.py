"""The engine a shard job starts is stopped in the background while the summary is written and logged, and is
stopped before the shard is marked done; a shutdown that fails leaves the shard not done."""

from __future__ import annotations

import threading
import time

import pytest

from specbatch.backends.dummy.dummy import DummyEngine
from specbatch.pipeline import run_job
from specbatch.run.folder import RunFolder


def test_the_engine_stops_beside_the_summary_and_before_the_done_marker(job_factory, monkeypatch) -> None:
    job = job_factory("engine.backend=dummy", "max_samples=3", "tracking=off")
    folder = RunFolder.for_job(job)
    seen: dict[str, object] = {}

    def slow_close(self) -> None:
        seen["thread"] = threading.current_thread()
        time.sleep(0.5)  # vLLM waits this long and more for its processes
        seen["summary written before the close ended"] = folder.stats_path.exists()
        seen["done before the close ended"] = folder.is_done()

    monkeypatch.setattr(DummyEngine, "close", slow_close)
    result = run_job(job)
    assert seen["thread"] is not threading.main_thread()
    assert seen["summary written before the close ended"] is True
    assert seen["done before the close ended"] is False
    assert result.generated and folder.is_done()


def test_a_failed_shutdown_leaves_the_shard_not_done(job_factory, monkeypatch) -> None:
    job = job_factory("engine.backend=dummy", "max_samples=3", "tracking=off")

    def broken_close(self) -> None:
        raise RuntimeError("engine core did not exit")

    monkeypatch.setattr(DummyEngine, "close", broken_close)
    with pytest.raises(RuntimeError, match="did not exit"):
        run_job(job)
    folder = RunFolder.for_job(job)
    assert not folder.is_done() and len(folder.parts()) == 1
    monkeypatch.undo()
    again = run_job(job)
    assert folder.is_done() and not again.generated and again.summary.rows == 3
