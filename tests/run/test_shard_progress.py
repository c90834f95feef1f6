"""The shard's progress: what the streaming loop counts (rows, samples, tokens, acceptance), the plain lines and the
reports at their period, the bar when asked for, and a resumed shard going on from the rows it had."""

from __future__ import annotations

import io
import logging
from typing import Any

import pytest

from conftest import fake_engine
from specbatch.backends.dummy.dummy import DummyEngine
from specbatch.config import ProgressConfig, ProgressDisplay
from specbatch.data.prompts import load_tokenizer
from specbatch.data.rows import SourceRow
from specbatch.engine import Request, engine_fingerprint
from specbatch.engine.spec_metrics import Counters
from specbatch.run.executor import ShardExecutor
from specbatch.run.generate import ShardGeneration
from specbatch.run.shard_progress import Progress, ShardProgress
from specbatch.run.streaming import ChunkStreamer

N = 2


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def lines_progress(reports: list[Progress], clock: Clock, total: int | None = 10, **kwargs: Any) -> ShardProgress:
    cfg = ProgressConfig(display=ProgressDisplay.lines, interval_seconds=10)
    return ShardProgress(cfg, "ngram-k3 shard 0/1", total, 2, N, reports.append, io.StringIO(), clock, **kwargs)


def test_a_plain_line_and_a_report_every_interval_with_rows_samples_tok_s_al_and_eta(caplog) -> None:
    caplog.set_level(logging.INFO, logger="specbatch.run.shard_progress")
    reports: list[Progress] = []
    clock = Clock()
    progress = lines_progress(reports, clock)
    progress.answered(Counters(generation_tokens=100, drafts=20, accepted_tokens=30))
    progress.finished(1, row=False)
    progress.finished(1, row=True)
    clock.now += 9.9
    progress.tick(4, 1)
    assert reports == [] and "progress" not in caplog.text  # not a whole interval yet
    clock.now += 0.1
    progress.tick(4, 1)
    [report] = reports
    # Rows and samples of earlier launches count (2 rows, 4 samples); tok/s, AL and the pace are this launch's:
    # 1 row in 10 s, 7 rows left.
    assert (report.rows_done, report.rows_total, report.samples_done, report.samples_total) == (3, 10, 6, 20)
    assert report.tokens_per_second == pytest.approx(10.0) and report.acceptance_length == pytest.approx(2.5)
    assert report.eta_seconds == pytest.approx(70.0)
    assert (
        "progress ngram-k3 shard 0/1: 3/10 rows (30%), 6/20 samples, 10.0 output tok/s, AL 2.50, ETA 0:01:10 "
        "(4 requests running or queued, 1 chunks open)"
    ) in caplog.text
    # Within the next interval, nothing more; at the end, the figures the last report did not have.
    clock.now += 5
    progress.tick()
    assert len(reports) == 1
    progress.close()
    assert len(reports) == 1, "nothing changed since the last report"
    progress = lines_progress(reports, clock)
    progress.finished(N, row=True)
    progress.close()
    assert reports[-1].rows_done == 3 and len(reports) == 2


def test_no_eta_before_a_row_is_done_and_none_without_the_shards_row_count() -> None:
    clock = Clock()
    progress = lines_progress([], clock)
    clock.now += 3
    first = progress.figures()
    assert first.eta_seconds is None and first.acceptance_length is None  # nothing drafted: no AL
    assert first.describe().endswith("0.0 output tok/s, ETA unknown until a row is done")
    unknown = lines_progress([], clock, total=None)
    unknown.finished(N, row=True)
    clock.now += 3
    figures = unknown.figures()
    assert figures.eta_seconds is None and figures.samples_total is None
    assert figures.describe().startswith("3 rows, 6 samples (the shard's row count is not known: no ETA)")


def test_a_report_that_fails_is_said_once_and_the_job_goes_on(caplog) -> None:
    def broken(progress: Progress) -> None:
        raise ConnectionError("store down")

    clock = Clock()
    cfg = ProgressConfig(display=ProgressDisplay.lines, interval_seconds=1)
    progress = ShardProgress(cfg, "none shard 0/1", 4, 0, 1, broken, io.StringIO(), clock)
    for _ in range(3):
        clock.now += 1
        progress.tick()
    progress.finished(1, row=True)
    progress.close()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage() for r in warnings] == [
        "could not report the shard's progress (ConnectionError: store down); the job goes on"
    ]


def test_the_bar_is_drawn_where_asked_and_only_on_a_terminal_by_default() -> None:
    clock = Clock()
    forced, plain = io.StringIO(), io.StringIO()
    bar = ShardProgress(
        ProgressConfig(display=ProgressDisplay.bar), "ngram-k3 shard 0/1", 10, 2, N, None, forced, clock
    )
    bar.answered(Counters(generation_tokens=50, drafts=10, accepted_tokens=12))
    bar.finished(N, row=True)
    clock.now += 1
    bar.tick()
    bar.close()
    drawn = forced.getvalue()
    assert "\r" in drawn and "ngram-k3 shard 0/1:  30%|" in drawn
    assert "| 3/10 rows, 6/20 samples, " in drawn and ", AL 2.20 [" in drawn and ", ETA " in drawn
    # A file (a Slurm log) gets no bar unless asked.
    auto = ShardProgress(ProgressConfig(), "ngram-k3 shard 0/1", 10, 2, N, None, plain, clock)
    auto.tick()
    auto.close()
    assert plain.getvalue() == ""


def test_the_loop_counts_a_row_done_when_every_turn_of_every_sample_is(job_factory) -> None:
    job = job_factory(
        "spec=ngram", "sampling=sampled", f"sampling.n={N}", "dataset=local", "dataset.path=x.jsonl",
        "dataset.prompt_format=turns",
    )  # fmt: skip
    rows = [
        SourceRow("r1", None, turns=["hello", "again"]),
        SourceRow("r2", None, turns=["refused by the engine", "never asked"]),
        SourceRow("r3", None, turns=["fine"]),
        SourceRow("r5", None, turns=["x " * 3000, "second"]),  # too long: every turn of every sample an error
        SourceRow("r4", None, error="line 9 is not a JSON object"),
    ]

    def refuse(request: Request) -> str | None:
        return "token id out of range" if request.row_id == "r2" and request.sample == 1 else None

    engine = DummyEngine(engine_fingerprint(job), k=job.spec.k, concurrency=1, length=3, refuse=refuse)
    reports: list[Progress] = []
    progress = ShardProgress(job.progress, "ngram-k3 shard 0/1", len(rows), 0, N, reports.append, io.StringIO())
    seen: list[Progress] = []
    tick = progress.tick
    progress.tick = lambda *args: (seen.append(progress.figures()), tick(*args))  # type: ignore[method-assign]
    written = []
    ChunkStreamer(engine, job, load_tokenizer(job.model), progress=progress).run([(0, rows)], written.append)
    progress.close()
    [last] = reports
    assert (last.rows_done, last.samples_done) == (5, 5 * N)
    # Rows done only with all their samples: never more rows than whole rows' worth of samples.
    assert all(p.rows_done * N <= p.samples_done for p in seen)
    assert [p.samples_done for p in seen] == sorted(p.samples_done for p in seen)
    ok = [r for r in written[0].output_rows if r["status"] == "ok"]
    assert last.output_tokens == sum(r["completion_tokens"] for r in ok) > 0
    accepted, steps = sum(r["accepted_tokens"] for r in ok), sum(r["spec_steps"] for r in ok)
    assert last.acceptance_length == pytest.approx(1 + accepted / steps)


class ProgressRecorder:
    """An observer that keeps the progress reports (and nothing else)."""

    def __init__(self) -> None:
        self.reports: list[Progress] = []

    def on_locked(self, folder: Any) -> None: ...

    def on_start(self, start: Any) -> None: ...

    def on_progress(self, progress: Progress) -> None:
        self.reports.append(progress)

    def on_finish(self, summary: Any, parts: Any) -> None: ...

    def on_end(self, error: BaseException | None) -> None: ...


def test_a_resumed_shard_goes_on_from_the_rows_its_earlier_launch_wrote(local_job_factory) -> None:
    job = local_job_factory("sampling=sampled", f"sampling.n={N}", "chunk_size=2", "tracking=off", rows=5)
    first = ProgressRecorder()
    # Killed after the 5th of 10 requests: chunk 0 (2 rows x 2 samples) written, chunk 1 in flight.
    with pytest.raises(KeyboardInterrupt):
        ShardExecutor(job, ShardGeneration(job, fake_engine(job, die_after=5)), first).run()
    assert [(p.rows_done, p.samples_done) for p in first.reports[-1:]] == [(2, 5)]
    again = ProgressRecorder()
    ShardExecutor(job, ShardGeneration(job, fake_engine(job)), again).run()
    [last] = again.reports
    # The 2 rows written before count from the start; this launch did the 3 others (chunk 1's again).
    assert (last.rows_done, last.rows_total, last.samples_done, last.samples_total) == (5, 5, 5 * N, 5 * N)
    assert last.rows_this_launch == 3
