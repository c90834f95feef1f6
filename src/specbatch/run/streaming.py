"""Generating a shard's chunks through one engine that is never left to drain.

Rows come in chunk by chunk; each row's turn 1 becomes a request per sample (``sampling.n`` of them, each with its own
seed), and each sample's later turn is asked as soon as that sample's turn before it finished (with its own answer in
the conversation): a chunk holds every (row, turn, sample) of its rows, so a resume redoes each exactly once.
Requests are added while the engine holds fewer than ``2 × its concurrency``: enough queued ahead that a finished
request's slot is taken at the next step, few enough that memory stays flat on huge shards. A chunk is handed to
``on_chunk`` (which writes its Parquet part) the moment its last row, turn and sample finished, whatever the other
chunks are doing: ``chunk_size`` sets how much a kill can lose, never the batch.

Rows that cannot be asked (malformed, empty, too long, refused by the engine, or whose previous turn failed) become
error rows and are never sent; the other rows of their chunk go on.

The loop tells the shard's progress (specbatch.run.shard_progress) of every finished request, sample and row, and
ticks it after every engine step; how it is shown and reported is its own business.
"""

from __future__ import annotations

import logging
import signal
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from specbatch.common.interrupts import StopRequested, signal_name
from specbatch.config import JobConfig, sample_seed
from specbatch.data.prompts import Prompt, length_error, oversized_error, render
from specbatch.data.rows import SourceRow
from specbatch.engine import Completion, Engine, Request, RequestRefused
from specbatch.engine.spec_metrics import Counters
from specbatch.run.output_rows import build_output_rows, error_output_row
from specbatch.run.step_log import StepLog

log = logging.getLogger(__name__)


class StreamProgress(Protocol):
    """What the loop tells of every finished request, sample and row, and after every engine step: the shard's
    progress (specbatch.run.shard_progress), or a Ray replica's reports (specbatch.cluster.ray_progress)."""

    def answered(self, counters: Counters) -> None: ...

    def finished(self, samples: int, row: bool) -> None: ...

    def tick(self, in_engine: int = 0, open_chunks: int = 0) -> None: ...


@dataclass
class ChunkResult:
    """A finished chunk: its output rows in row order (then turn, then sample) and what its requests counted."""

    number: int
    output_rows: list[dict[str, Any]]
    # From the per-request figures of the chunk's completions (the engine counters cannot be split by chunk).
    counters: Counters
    # Seconds from the start of the loop to this chunk's last completion.
    elapsed: float


@dataclass
class StreamResult:
    chunks: list[int] = field(default_factory=list)
    # Wall seconds of the whole loop (chunks overlap, so theirs are not summed).
    seconds: float = 0.0
    # Engine counter differences over the loop; None when the engine has no counters (or they went backwards).
    counters: Counters | None = None
    # Whose work the counters count (Engine.counters_scope): "engine", "server" (every client's) or "requests".
    counters_scope: str = "engine"
    # True when stop_requested() ended admission before every chunk was admitted.
    stopped: bool = False
    # True when until() ended admission before every chunk was admitted (the rest is for another set-up).
    handed_over: bool = False


@dataclass
class _Chunk:
    number: int
    rows: list[SourceRow]
    output_rows: list[tuple[tuple[int, int, int], dict[str, Any]]] = field(default_factory=list)
    counters: Counters = field(default_factory=Counters)
    # Row turns asked and not answered yet; the chunk is finished when none are left.
    in_flight: int = 0
    # Per row, its samples not finished yet (a sample is finished when its last turn is answered or failed).
    samples_left: list[int] = field(default_factory=list)


@dataclass
class _Asked:
    chunk: _Chunk
    position: int
    prompt: Prompt
    answers: list[str]


class ChunkStreamer:
    """Drives one engine over the chunks of one shard (see the module docstring)."""

    def __init__(
        self,
        engine: Engine,
        job: JobConfig,
        tokenizer: Any,
        seed_setup: str | None = None,
        progress: StreamProgress | None = None,
    ) -> None:
        self.engine, self.job, self.tokenizer = engine, job, tokenizer
        self.method, self.k = job.spec.method.value, job.spec.k
        # What the samples' seeds are drawn for (sample_seed): the run's own set-up, which is the one this engine
        # runs unless ``seed_setup`` names another: spec=auto's phases run a candidate's job with the seeds of
        # "auto", so that its rows never repeat the samples of that candidate's own fixed run (its baseline's).
        self.setup = seed_setup or job.spec.label
        self.limit = 2 * max(1, engine.concurrency or 1)
        # Every engine step timed, with what the engine says it held (specbatch.run.step_log).
        self.steps = StepLog(job.spec.label, job.spec.k_schedule, engine.concurrency)
        self._ready: deque[Request] = deque()
        self._asked: dict[tuple[str, int, int], _Asked] = {}
        # Requests answered so far: each output row records its place in that order.
        self._answered_requests = 0
        # The shard's progress (shown and reported by it), told of every finished request, sample and row.
        self.progress = progress

    def run(
        self,
        chunks: Iterable[tuple[int, list[SourceRow]]],
        on_chunk: Callable[[ChunkResult], None],
        stop_requested: Callable[[], bool] = lambda: False,
        until: Callable[[], bool | None] = lambda: False,
    ) -> StreamResult:
        """Stream ``chunks`` until every one is written. A stop signal (``stop_requested``) or ``until()`` turning
        true (spec=auto's switch to its winner) ends admission; what was admitted is finished and written either
        way, and the result says which ended it. While ``until()`` answers None (undecided) the engine is only
        kept full, with no requests queued ahead, so that as few rows as possible are committed to this set-up
        before the answer."""
        result = StreamResult()
        source = iter(chunks)
        admitting, open_chunks, fed = True, 0, False
        batch, undecided = max(1, self.engine.concurrency or 1), True
        before = self.engine.counters()
        began = time.perf_counter()

        def finish(chunk: _Chunk) -> None:
            nonlocal open_chunks
            open_chunks -= 1
            output_rows = [out for _, out in sorted(chunk.output_rows, key=lambda item: item[0])]
            on_chunk(ChunkResult(chunk.number, output_rows, chunk.counters, time.perf_counter() - began))
            result.chunks.append(chunk.number)

        def halt() -> bool:
            nonlocal undecided
            if stop_requested():
                result.stopped = True
                return True
            answer = until()
            undecided, result.handed_over = answer is None, bool(answer)
            return result.handed_over

        try:
            while True:
                if admitting and halt():  # checked every step, not only when the engine has room
                    admitting = False
                elif not admitting:
                    stop_requested()  # says a stop that comes once admission is over (what is in flight finishes)
                limit = batch if undecided else self.limit
                while admitting and self.engine.unfinished + len(self._ready) < limit:
                    if halt():
                        admitting = False
                        break
                    item = next(source, None)
                    if item is None:
                        admitting = False
                        break
                    chunk = _Chunk(*item)
                    chunk.samples_left = [self.job.sampling.n] * len(chunk.rows)
                    open_chunks += 1
                    for position, row in enumerate(chunk.rows):
                        self._ask(chunk, position, row, 1, [], range(self.job.sampling.n))
                    if not chunk.in_flight:
                        finish(chunk)
                while self._ready and self.engine.unfinished < limit:
                    self._submit(self._ready.popleft(), finish)
                if not fed and self.engine.unfinished:
                    fed = True
                    log.info("engine fed: %d requests from %d chunks", self.engine.unfinished, open_chunks)
                if not self.engine.unfinished and not self._ready:
                    if not admitting:
                        break
                    continue
                step_began = time.perf_counter()
                completions = self.engine.step()
                step_ended = time.perf_counter()
                load = self.engine.last_step
                if load is not None:
                    took = step_ended - step_began if load.seconds is None else load.seconds
                    self.steps.record(step_ended - began, took, load)
                for completion in completions:
                    self._answered(completion, finish)
                if self.progress is not None:
                    self.progress.tick(self.engine.unfinished + len(self._ready), open_chunks)
        except BaseException as exc:
            # A shared engine must not hand this job's leftovers to the next one. An engine that died (below) may
            # fail to cancel too: the first error is the one to report.
            try:
                self.engine.cancel()
            except Exception:  # noqa: BLE001
                log.debug("cancelling the unfinished requests failed too", exc_info=True)
            if stop_requested() and not isinstance(exc, StopRequested):
                # Slurm signals every process of the step: engine processes (vLLM's engine core, a child server)
                # may end with the job's SIGTERM before the job stopped them. That is the stop, not a failure.
                signum = getattr(stop_requested, "signum", None) or signal.SIGTERM
                raise StopRequested(
                    f"stopped by {signal_name(signum)}: the engine's own processes ended with the signal, so the "
                    "chunks in flight were abandoned, nothing of theirs was written",
                    signum,
                ) from exc
            raise
        assert not open_chunks and not self._asked, "every admitted chunk is finished when the loop ends"
        result.seconds = time.perf_counter() - began
        result.counters = _difference(before, self.engine.counters())
        result.counters_scope = self.engine.counters_scope
        return result

    def _ask(
        self, chunk: _Chunk, position: int, row: SourceRow, turn: int, answers: list[str], samples: Iterable[int]
    ) -> None:
        """Queue ``turn`` of ``row`` for each of ``samples`` (all n for turn 1; one sample's own conversation after
        that), or record it (and its later turns) as errors when it cannot be asked."""
        samples = list(samples)
        if row.error is not None:
            self._fail(chunk, position, row, turn, row.error, None, samples)
            return
        oversized = oversized_error(row, answers, self.tokenizer, self.job.model.max_model_len)
        if oversized:
            self._fail(chunk, position, row, turn, oversized, None, samples)
            return
        prompt = render(row, turn, answers, self.job.dataset, self.tokenizer)
        problem = self._prompt_problem(prompt)
        if problem:
            self._fail(chunk, position, row, turn, problem, prompt, samples)
            return
        sampling = self.job.sampling
        for sample in samples:
            # Each sample its own request (n=1): vLLM gives per-request speculative figures only for n=1, and the
            # engine shares the prompt's prefill between them through its prefix cache, as it does for its own n.
            seed = self._seed(row.row_id, sample)
            request = Request(
                row.row_id, turn, prompt.token_ids, sampling.for_sample(seed), prompt.messages, sample=sample
            )
            self._asked[(row.row_id, turn, sample)] = _Asked(chunk, position, prompt, answers)
            chunk.in_flight += 1
            # A row's next turn goes first: its conversation is open and its chunk waits for it.
            (self._ready.appendleft if turn > 1 else self._ready.append)(request)

    def _submit(self, request: Request, finish: Callable[[_Chunk], None]) -> None:
        try:
            self.engine.add(request)
        except RequestRefused as exc:
            asked = self._asked.pop((request.row_id, request.turn, request.sample))
            asked.chunk.in_flight -= 1
            row = asked.chunk.rows[asked.position]
            why = f"refused by the engine: {exc}"
            self._fail(asked.chunk, asked.position, row, request.turn, why, asked.prompt, [request.sample])
            if not asked.chunk.in_flight:
                finish(asked.chunk)

    def _answered(self, completion: Completion, finish: Callable[[_Chunk], None]) -> None:
        request = completion.request
        asked = self._asked.pop((request.row_id, request.turn, request.sample))
        chunk, position = asked.chunk, asked.position
        chunk.in_flight -= 1
        if completion.error is not None:
            row = chunk.rows[position]
            self._fail(chunk, position, row, request.turn, completion.error, asked.prompt, [request.sample])
            if not chunk.in_flight:
                finish(chunk)
            return
        order = self._answered_requests
        seed = request.sampling.seed
        outs = build_output_rows(asked.prompt, completion.samples, self.method, self.k, order, request.sample, seed)
        for out in outs:
            chunk.output_rows.append(((position, out["turn"], out["sample_index"]), out))
        counters = _request_counters(completion)
        chunk.counters = chunk.counters + counters
        self._answered_requests += 1
        if self.progress is not None:
            self.progress.answered(counters)
        row = chunk.rows[position]
        if request.turn < row.num_turns:
            # Each sample continues its own conversation, with its own answer.
            answers = [*asked.answers, completion.samples[0].text]
            self._ask(chunk, position, row, request.turn + 1, answers, [request.sample])
        else:
            self._samples_finished(chunk, position, 1)
        if not chunk.in_flight:
            finish(chunk)

    def _fail(
        self,
        chunk: _Chunk,
        position: int,
        row: SourceRow,
        turn: int,
        why: str,
        prompt: Prompt | None,
        samples: list[int],
    ) -> None:
        """``turn`` of the row is an error row saying why, for each of ``samples``; every later turn of those
        samples says which turn failed and why (a malformed row gives the same reason on every turn)."""
        later = why if row.error is not None else f"turn {turn} failed: {why}"
        for t in range(turn, max(row.num_turns, turn) + 1):
            message, shown = (why, prompt) if t == turn else (later, None)
            for sample in samples:
                seed = self._seed(row.row_id, sample)
                out = error_output_row(row.row_id, t, row.category, message, self.method, self.k, shown, sample, seed)
                chunk.output_rows.append(((position, t, sample), out))
        # Nothing more is asked for these samples: every turn of theirs is now a row.
        self._samples_finished(chunk, position, len(samples))

    def _samples_finished(self, chunk: _Chunk, position: int, samples: int) -> None:
        """``samples`` of the row at ``position`` have every turn answered or failed; the row is done with its last."""
        left = chunk.samples_left[position] = chunk.samples_left[position] - samples
        if self.progress is not None:
            self.progress.finished(samples, row=left == 0)

    def _seed(self, row_id: str, sample: int) -> int | None:
        """The seed of one sample's requests (every turn of it): recorded on its rows, error rows too."""
        return sample_seed(self.job.sampling.seed, self.setup, row_id, sample)

    def _prompt_problem(self, prompt: Prompt) -> str | None:
        if not prompt.token_ids:
            return "empty prompt: it has no tokens"
        return length_error(prompt, self.job.sampling.max_tokens, self.job.model.max_model_len)


def _difference(before: Counters | None, after: Counters | None) -> Counters | None:
    """The counters' growth over the loop; None when either snapshot is missing or a counter went backwards (a
    server restarted meanwhile): then the figures come from the requests' own."""
    if before is None or after is None:
        return None
    delta = after - before
    if min(delta.prompt_tokens, delta.generation_tokens, delta.drafts, delta.draft_tokens, delta.accepted_tokens) < 0:
        log.warning("the engine's counters went backwards (a server restarted?): figures from the requests' own")
        return None
    return delta


def _request_counters(completion: Completion) -> Counters:
    """What one finished request added to the engine counters, from its own figures."""
    total = Counters(
        prompt_tokens=len(completion.request.prompt_token_ids) * len(completion.samples),
        generation_tokens=sum(len(s.token_ids) for s in completion.samples),
    )
    for sample in completion.samples:
        if sample.spec is not None:
            total = total + sample.spec.counters()
    return total
