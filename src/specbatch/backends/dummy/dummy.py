"""A deterministic engine without a model, for logic tests and jobs/bench_memory.py (``engine.backend=dummy``).

It behaves like a real engine where the job can tell: at most ``concurrency`` requests run at once and the rest
wait, each running request gains tokens every step, requests finish in the order their lengths make them finish
(not the order they came in), and with a speculative method each step is a speculative step whose figures obey
vLLM's invariants (accepted ≤ drafted, AL = 1 + accepted / steps, histogram over 0..k accepted). Lengths, tokens and
acceptance are functions of the prompt alone (and, when sampling, of the request's seed), so the same request always
gives the same completion.

Sampling (temperature > 0) draws each token from a fixed distribution of the prompt and the position
(``TOKEN_PROBABILITIES`` over ``len`` candidates, the first being the greedy token), with uniforms from the request's
seed: every token, drafted or not, comes from that distribution, so with or without a speculative method the
completions have one distribution, as a lossless engine's do. ``_token`` is where a test engine breaks that.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Self

from specbatch.backends.vllm.vllm_family import VllmFamily
from specbatch.config import JobConfig
from specbatch.engine.base import Completion, Request, RequestRefused, Sample, StepLoad
from specbatch.engine.spec_metrics import Counters, RowSpecFigures, acceptance_length

# vLLM's own default for max_num_seqs on CPU; the dummy runs as many at once when engine.max_num_seqs is null.
DEFAULT_CONCURRENCY = 256
VOCABULARY = 1000
# Under sampling: the chance of each candidate token at a position (the first is the greedy token).
TOKEN_PROBABILITIES = (0.4, 0.3, 0.2, 0.1)


def _digest(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:8], "big")


@dataclass(frozen=True)
class StepCost:
    """What a step of the dummy takes, so that tests control the machine spec=auto measures: ``base`` +
    ``per_token`` x the tokens it processes (one per request decoding, its prompt's when prefilling, one per draft
    token verified) + ``speculative`` when it verifies drafts."""

    base: float
    per_token: float = 0.0
    speculative: float = 0.0

    def seconds(self, load: StepLoad) -> float:
        processed = load.requests + load.prompt_tokens + load.draft_tokens
        return self.base + self.per_token * processed + (self.speculative if load.draft_tokens else 0.0)


@dataclass
class _Running:
    request: Request
    sample: int
    length: int
    tokens: list[int] = field(default_factory=list)
    steps: int = 0
    # Steps that verified drafts, and the draft tokens they verified (a k schedule may run k=0 steps too).
    spec_steps: int = 0
    draft_tokens: int = 0
    histogram: list[int] = field(default_factory=list)
    # What its sampled tokens are drawn from (DummyEngine._draws).
    draws: object = 0


class DummyEngine(VllmFamily):
    """Answers every prompt with made-up tokens; ``refuse`` and ``die_after`` play a bad request and a crash."""

    name = "dummy"
    tokens_without_a_model = "made up by the dummy backend, which has no model"
    # What each step of an engine start() builds costs (StepCost; None: no time at all): how tests give spec=auto a
    # machine to measure.
    start_step_cost: StepCost | None = None

    def __init__(
        self,
        fingerprint: str,
        k: int | None = None,
        concurrency: int | None = None,
        refuse: Callable[[Request], str | None] | None = None,
        die_after: int | None = None,
        length: int | Callable[[Request], int] | None = None,
        keep_requests: bool = False,
        k_schedule: list[list[int]] | None = None,
        step_cost: StepCost | None = None,
    ) -> None:
        super().__init__(fingerprint, concurrency or DEFAULT_CONCURRENCY)
        self.k = k
        # k per batch size, as vLLM follows spec.k_schedule: the k of a step is the one of its running requests.
        self.k_schedule = k_schedule
        # Each step sleeps what this says it costs (None: no time at all).
        self.step_cost = step_cost
        # refuse(request) -> why the engine will not take it, or None.
        self.refuse = refuse
        # After this many completions, the next step raises KeyboardInterrupt (like a kill: nothing in flight lands).
        self.die_after = die_after
        # Completions this many tokens long (capped by sampling.max_tokens), or length(request) tokens; a fixed
        # length makes requests finish in the order they were added.
        self.length = length
        self.completed = 0
        # Every request added, in order, for tests that check what was asked (off: memory stays flat on big runs).
        self.keep_requests = keep_requests
        self.added: list[Request] = []
        self._waiting: deque[_Running] = deque()
        self._running: list[_Running] = []
        # Samples of a request still running (a request finishes when all its samples have).
        self._open: dict[int, dict[int, _Running]] = {}
        # Running totals behind counters(), kept as plain numbers: they change at every token of every request.
        self._totals = {
            "prompt_tokens": 0,
            "generation_tokens": 0,
            "drafts": 0,
            "draft_tokens": 0,
            "accepted_tokens": 0,
        }
        self._per_position = [0] * (k or 0)
        # Requests sampled without a seed so far (each draws anew).
        self._unseeded = 0

    @classmethod
    def start(cls, job: JobConfig) -> Self:
        engine = cls(
            cls.fingerprint_of(job),
            k=job.spec.k,
            concurrency=job.engine.max_num_seqs,
            k_schedule=job.spec.k_schedule,
            step_cost=cls.start_step_cost or _step_cost(job),
        )
        if engine.step_cost is not None:
            # With a time model its start-up is the model's too (one empty step), not what the machine the tests
            # run on took to build it: spec=auto weighs a switch of engines against it.
            engine.startup_seconds = engine.step_cost.base
        return engine

    def add(self, request: Request) -> None:
        why = self.refuse(request) if self.refuse else None
        if why:
            raise RequestRefused(why)
        if self.keep_requests:
            self.added.append(request)
        key = id(request)
        self._open[key] = {}
        for sample in range(request.sampling.n):
            draws = self._draws(request)
            length = self._length(request, sample, draws)
            running = _Running(request, sample, length, histogram=[0] * ((self.k or 0) + 1), draws=draws)
            self._open[key][sample] = running
            self._waiting.append(running)
        self._totals["prompt_tokens"] += len(request.prompt_token_ids) * request.sampling.n

    def _length(self, request: Request, sample: int, draws: object) -> int:
        if request.sampling.ignore_eos:
            return request.sampling.max_tokens
        if self.length is not None:
            wanted = self.length(request) if callable(self.length) else self.length
            return max(1, min(wanted, request.sampling.max_tokens))
        # Mixed lengths, like real completions: from 1 token to sampling.max_tokens.
        return 1 + _digest(request.prompt_token_ids, sample, draws) % request.sampling.max_tokens

    def _draws(self, request: Request) -> object:
        """What a request's random draws come from: nothing when greedy, its seed when sampling (a request without a
        seed gets a fresh one, as vLLM draws from its own random state)."""
        if not request.sampling.temperature:
            return 0
        if request.sampling.seed is None:
            self._unseeded += 1
            return ("unseeded", self._unseeded)
        return request.sampling.seed

    def _greedy_token(self, run: _Running) -> int:
        """The most likely next token of ``run`` (the only one when greedy)."""
        return _digest(run.request.prompt_token_ids, run.sample, len(run.tokens)) % VOCABULARY

    def _token(self, run: _Running, drafted: bool) -> int:
        """The next token of ``run``: greedy, the first candidate; sampling, a candidate drawn with
        TOKEN_PROBABILITIES whether it was drafted or not (lossless). ``drafted``: a draft token the step accepted."""
        position = len(run.tokens)
        greedy = self._greedy_token(run)
        if not run.request.sampling.temperature:
            return greedy
        uniform = _digest(run.draws, run.sample, position) / 2**64
        choice, total = 0, TOKEN_PROBABILITIES[0]
        while uniform >= total and choice < len(TOKEN_PROBABILITIES) - 1:
            choice += 1
            total += TOKEN_PROBABILITIES[choice]
        return greedy if choice == 0 else _digest(run.request.prompt_token_ids, position, choice) % VOCABULARY

    def step(self) -> list[Completion]:
        if self.die_after is not None and self.completed >= self.die_after:
            raise KeyboardInterrupt("dummy engine told to die")
        prompt_tokens = 0
        while self._waiting and len(self._running) < (self.concurrency or DEFAULT_CONCURRENCY):
            run = self._waiting.popleft()
            prompt_tokens += len(run.request.prompt_token_ids)
            self._running.append(run)
        requests = len(self._running)
        k = self._step_k(requests)
        done: list[Completion] = []
        produced = drafted = 0
        for run in list(self._running):
            before = len(run.tokens)
            drafted += self._advance(run, k)
            produced += len(run.tokens) - before
            if len(run.tokens) < run.length:
                continue
            self._running.remove(run)
            samples = self._open[id(run.request)]
            if all(len(s.tokens) >= s.length for s in samples.values()):
                del self._open[id(run.request)]
                done.append(Completion(run.request, [self._sample(s) for s in samples.values()], seconds=0.0))
                self.completed += 1
        if self.step_cost is not None:
            # Without a time model its steps take no time worth timing: it then has no steps to tell of.
            load = StepLoad(requests, produced, prompt_tokens, drafted)
            self.last_step = dataclasses.replace(load, seconds=self.step_cost.seconds(load))
            time.sleep(self.last_step.seconds)
        return done

    def set_k_schedule(self, schedule: list[list[int]]) -> bool:
        """As vLLM's in-process scheduler: the next step follows the new schedule (its k capped at the engine's)."""
        if not self.k:
            return False
        self.k_schedule = [[first, last, min(k, self.k)] for first, last, k in schedule]
        return True

    def _step_k(self, requests: int) -> int:
        """The k of a step of ``requests`` requests: the schedule's at that batch size, else the job's k."""
        for first, last, k in self.k_schedule or []:
            if first <= requests <= last:
                return k
        return self.k or 0

    def _advance(self, run: _Running, k: int) -> int:
        """One engine step: 1 token without speculation, 1 + accepted (0..k) with it; the draft tokens verified."""
        accepted = 0
        if k:
            accepted = _digest(run.request.prompt_token_ids, run.sample, run.steps) % (k + 1)
            accepted = min(accepted, run.length - len(run.tokens) - 1)
            run.histogram[accepted] += 1
            self._totals["drafts"] += 1
            self._totals["draft_tokens"] += k
            self._totals["accepted_tokens"] += accepted
            for position in range(accepted):
                self._per_position[position] += 1
            run.spec_steps += 1
            run.draft_tokens += k
        run.steps += 1
        for index in range(accepted + 1):
            run.tokens.append(self._token(run, drafted=index < accepted))
        self._totals["generation_tokens"] += accepted + 1
        return k

    def _sample(self, run: _Running) -> Sample:
        spec = None
        if self.k:
            accepted = sum(j * count for j, count in enumerate(run.histogram))
            spec = RowSpecFigures(
                spec_steps=run.spec_steps,
                draft_tokens=run.draft_tokens,
                accepted_tokens=accepted,
                acceptance_length=acceptance_length(accepted, run.spec_steps),
                acceptance_histogram=list(run.histogram),
            )
        reason = "length" if run.length == run.request.sampling.max_tokens else "stop"
        return Sample(" ".join(f"t{t}" for t in run.tokens), list(run.tokens), reason, spec)

    @property
    def unfinished(self) -> int:
        return len(self._open)

    def cancel(self) -> None:
        self._waiting.clear()
        self._running.clear()
        self._open.clear()

    def counters(self) -> Counters:
        return Counters(**self._totals, accepted_per_position=tuple(self._per_position))


def _step_cost(job: JobConfig) -> StepCost | None:
    """engine.step_seconds as a time model: each step sleeps that long."""
    seconds = getattr(job.engine, "step_seconds", None)
    return None if seconds is None else StepCost(base=float(seconds))
