"""The shard executor with stand-in steps and observer: its bookkeeping alone (done check, run record, lock,
clean-up, summary, done marker) and the order in which observers see a run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from specbatch.common.atomic_files import temporary_path
from specbatch.config import ConfigError
from specbatch.engine.spec_metrics import Counters
from specbatch.run.events import RunStart
from specbatch.run.executor import ShardExecutor, ShardPlan
from specbatch.run.folder import RunFolder
from specbatch.run.records.output_parts import write_parquet
from specbatch.run.sharding import Shard
from specbatch.run.summary import RowTotals, Summary, summarize


class Steps:
    """Writes an empty part per chunk; ``fail`` raises from generate(), ``fail_start`` from start_engine(),
    ``fail_release`` from release(). ``timeline``: a list shared with the observer, to see the order of both."""

    def __init__(
        self,
        chunks: int = 2,
        fail: BaseException | None = None,
        fail_release: BaseException | None = None,
        fail_start: BaseException | None = None,
        timeline: list[str] | None = None,
    ) -> None:
        self.chunks, self.fail, self.fail_release, self.fail_start = chunks, fail, fail_release, fail_start
        self.calls: list[Any] = []
        self.folder: RunFolder | None = None
        self.timeline = timeline if timeline is not None else []

    def check(self) -> None:
        self.calls.append("check")

    def prepare(self, shard: Shard) -> ShardPlan:
        self.calls.append("prepare")
        return ShardPlan(source_rows=2 * self.chunks, span=range(0, 2 * self.chunks), chunks=self.chunks)

    def chunk_digests(self) -> list[str]:
        return [f"digest-{n}" for n in range(self.chunks)]

    def load_engine(self) -> None:
        self.timeline.append("engine loaded")

    def start_engine(self, todo: list[int]) -> None:
        self.timeline.append("engine built")
        if self.fail_start is not None:
            raise self.fail_start

    def generate(self, folder: RunFolder, config: dict[str, Any], todo: list[int], on_progress: Any) -> None:
        self.timeline.append("generate")
        self.calls.append(("generate", todo))
        self.folder = folder
        if self.fail is not None:
            raise self.fail
        for number in todo:
            write_parquet([], folder.part_path(number), config)

    def summarize(self, folder: RunFolder, parts: list[Path]) -> Summary:
        return summarize(
            Counters(),
            method="none",
            k=None,
            totals=RowTotals(),
            generation_seconds=1.0,
            engine_startup_seconds=0.0,
            warmup_seconds=0.0,
        )

    def release(self) -> None:
        # What the executor has written when the engine's shutdown is waited for (nothing before generate).
        folder = self.folder
        self.calls.append(("release", folder and folder.stats_path.exists(), folder and folder.is_done()))
        if self.fail_release is not None:
            raise self.fail_release


class Recorder:
    """An observer that notes each event and what the run folder held at that moment."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.folder: RunFolder | None = None

    def on_locked(self, folder: RunFolder) -> None:
        self.folder = folder
        self.events.append("locked")

    def on_start(self, start: RunStart) -> None:
        assert start.source_rows == 4 and start.folder == self.folder and "git_commit" in start.runtime
        self.events.append("start")

    def on_progress(self, progress: Any) -> None:
        self.events.append("progress")

    def on_finish(self, summary: Summary, parts: list[Path]) -> None:
        assert self.folder is not None and self.folder.stats_path.exists() and not self.folder.is_done()
        self.events.append(f"finish {len(parts)} parts")

    def on_end(self, error: BaseException | None) -> None:
        self.events.append(f"end {type(error).__name__ if error else None}")


def test_a_run_is_observed_from_lock_to_end_and_marked_done_last(job_factory) -> None:
    job = job_factory("spec=none")
    steps, observer = Steps(), Recorder()
    result = ShardExecutor(job, steps, observer).run()
    assert observer.events == ["locked", "start", "finish 2 parts", "end None"]
    # The engine's shutdown (left running by generate) is waited for after the summary, before the done marker.
    assert steps.calls == ["check", "prepare", ("generate", [0, 1]), ("release", True, False)]
    folder = RunFolder.for_job(job)
    assert result.folder == folder and result.generated and folder.is_done()
    assert result.parquet_files == [folder.part_path(0), folder.part_path(1)] == folder.parts()
    assert folder.read_summary() == result.summary
    assert folder.read_run_record()["shard_count"] == 1 and folder.config_yaml.is_file()
    assert folder.read_source_record() == {"chunks": ["digest-0", "digest-1"]}

    # Done: no steps, no events.
    steps, observer = Steps(), Recorder()
    again = ShardExecutor(job, steps, observer).run()
    assert not again.generated and again.summary == result.summary and steps.calls == observer.events == []


def test_the_executor_builds_the_engine_then_starts_tracking_then_generates(job_factory) -> None:
    # The engine's library is imported before on_locked (tracking's set-up would take turns with it at the
    # interpreter), and built after it.
    observer = Recorder()
    ShardExecutor(job_factory("spec=none"), Steps(timeline=observer.events), observer).run()
    assert observer.events == [
        "engine loaded",
        "locked",
        "engine built",
        "start",
        "generate",
        "finish 2 parts",
        "end None",
    ]


def test_an_engine_that_fails_to_start_still_leaves_a_run_ended_with_why(job_factory) -> None:
    observer = Recorder()
    steps = Steps(fail_start=RuntimeError("no memory for the KV cache"), timeline=observer.events)
    with pytest.raises(RuntimeError, match="KV cache"):
        ShardExecutor(job_factory("spec=none"), steps, observer).run()
    assert observer.events == ["engine loaded", "locked", "engine built", "start", "end RuntimeError"]
    assert steps.calls == ["check", "prepare", ("release", None, None)]


def test_a_failed_run_ends_with_its_error_and_without_the_done_marker(job_factory) -> None:
    job = job_factory("spec=none")
    observer = Recorder()
    with pytest.raises(KeyError):
        ShardExecutor(job, Steps(fail=KeyError("engine died")), observer).run()
    assert observer.events == ["locked", "start", "end KeyError"]
    folder = RunFolder.for_job(job)
    assert not folder.is_done() and not folder.stats_path.exists()


def test_a_failed_engine_shutdown_leaves_the_shard_not_done(job_factory) -> None:
    job = job_factory("spec=none")
    observer = Recorder()
    with pytest.raises(OSError, match="engine would not stop"):
        ShardExecutor(job, Steps(fail_release=OSError("engine would not stop")), observer).run()
    assert observer.events == ["locked", "start", "finish 2 parts", "end OSError"]
    folder = RunFolder.for_job(job)
    assert not folder.is_done() and folder.stats_path.exists()
    # A rerun finds every part written and only finishes the bookkeeping.
    steps = Steps()
    ShardExecutor(job, steps, Recorder()).run()
    assert ("generate", []) in steps.calls and folder.is_done()


def test_stale_temporaries_go_and_only_missing_chunks_are_generated(job_factory) -> None:
    job = job_factory("spec=none")
    folder = RunFolder.for_job(job)
    with pytest.raises(KeyError):
        ShardExecutor(job, Steps(fail=KeyError("killed")), Recorder()).run()
    write_parquet([], folder.part_path(0), {})
    stale = [temporary_path(folder.part_path(1)), temporary_path(folder.part_stats_path(1))]
    for path in stale:
        path.write_text("half a file")
    steps = Steps()
    ShardExecutor(job, steps, Recorder()).run()
    assert steps.calls[-2] == ("generate", [1]) and not any(p.exists() for p in stale)


def test_another_shard_count_is_refused_before_the_data_is_read(job_factory) -> None:
    ShardExecutor(job_factory("spec=none"), Steps(), Recorder()).run()
    steps, observer = Steps(), Recorder()
    with pytest.raises(ConfigError, match="shard.count=1"):
        ShardExecutor(job_factory("spec=none", "shard.index=1", "shard.count=2"), steps, observer).run()
    assert steps.calls == ["check"] and observer.events == []


def test_rows_changed_since_the_shard_started_refuse_it_before_the_engine_is_built(job_factory) -> None:
    job = job_factory("spec=none")
    with pytest.raises(KeyError):
        ShardExecutor(job, Steps(fail=KeyError("killed")), Recorder()).run()
    write_parquet([], RunFolder.for_job(job).part_path(0), {})

    class Edited(Steps):
        def chunk_digests(self) -> list[str]:
            return ["digest-0 edited", "digest-1"]

    observer = Recorder()
    with pytest.raises(ConfigError, match="rows of chunk 0"):
        ShardExecutor(job, Edited(timeline=observer.events), observer).run()
    # Locked (so what the killed launch left is settled: tests/run/test_races_cpu.py), never built nor started.
    assert observer.events == ["engine loaded", "locked"]
