"""The engine interface every backend implements, and the neutral records that cross it.

Requests go in one at a time (``add``); ``step`` advances the engine and returns the completions that finished in
that step, in whatever order they finish. The caller decides what to add next (more rows, a row's next turn), so a
backend never waits for a whole batch: it is kept full as long as the caller keeps adding. Nothing here, and nothing
a caller sees, is an object of a particular engine library.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from specbatch.config import (
    CHECKPOINT_KIND,
    CHECKPOINT_METHODS,
    ConfigError,
    JobConfig,
    SamplingConfig,
    engine_identity,
)
from specbatch.engine.spec_metrics import Counters, RowSpecFigures


class EngineUnavailable(RuntimeError):
    """The engine is gone for every request (a server that stopped answering): the shard stops, resumable."""


class RequestRefused(ValueError):
    """The engine will not take this one request (e.g. a token id outside the vocabulary); the others go on."""


@dataclass(frozen=True)
class Request:
    """One turn of one row, ready to generate: the exact prompt token ids and how to sample. The job asks each of
    ``sampling.n`` samples as a request of its own (``sample``, with n=1 and the sample's seed in ``sampling``)."""

    row_id: str
    turn: int
    prompt_token_ids: list[int]
    sampling: SamplingConfig
    # The conversation the token ids were rendered from (chat data sets): for engines that take a chat instead.
    messages: tuple[dict[str, str], ...] | None = None
    # Which of the row's sampling.n samples this request is (0 with n=1).
    sample: int = 0


@dataclass(frozen=True)
class Sample:
    """One completion of a request (``request.sampling.n`` of them: one for the job's requests)."""

    text: str
    token_ids: list[int]
    finish_reason: str | None
    # Per-request speculative figures; None when the engine does not speculate or does not report them.
    spec: RowSpecFigures | None = None


@dataclass(frozen=True)
class Completion:
    """A finished request with its samples; ``seconds`` from ``add`` to the step that finished it.

    ``error`` (and no samples) when the engine gave up on this request alone (a server's error answer after its
    retries): the row becomes an error row and the others go on."""

    request: Request
    samples: list[Sample]
    seconds: float
    error: str | None = None


@dataclass(frozen=True)
class StepLoad:
    """What one engine step held, as the engine itself counted it (``Engine.last_step``): what the job's step
    timing (specbatch.run.step_log) records beside the step's wall time, and spec=auto's cost model reads."""

    # Requests the step ran (scheduled in it, prefilling or decoding): the batch occupancy.
    requests: int
    # Output tokens the step produced (with speculation: 1 + accepted per request that decoded).
    tokens: int
    # Prompt tokens the step prefilled.
    prompt_tokens: int = 0
    # Draft tokens the step verified; 0: no speculation in this step (spec=none, or k=0 at this batch size).
    draft_tokens: int = 0
    # What the step took by the engine's own clock; None (every real engine): the job times it by the wall clock.
    # The dummy's time model says it, so that what spec=auto fits from its steps does not hang on the load of the
    # machine the tests run on.
    seconds: float | None = None


def require_checkpoint(job: JobConfig) -> None:
    """A method that drafts with a trained checkpoint names one (spec.model); ConfigError saying how."""
    spec = job.spec
    if spec.method in CHECKPOINT_METHODS and spec.model is None:
        raise ConfigError(
            f"spec.model is not set: spec={spec.method.value} needs {CHECKPOINT_KIND[spec.method]} trained for "
            f"model.name={job.model.name}, and no conf/model_spec preset pairs one with this model. Set "
            f"spec.model=<folder or hub id>, or pick a model that has a preset (ls "
            f"conf/model_spec/*_{spec.method.value}.yaml). Random heads for trying the mechanics: model=tiny_llama "
            "(python -m specbatch.assets.tiny)."
        )


class Engine(ABC):
    """A backend and, once started, its engine. Start-up and warm-up seconds are kept apart from generation time.

    The class is the one owner of everything about its backend: the rest of the job asks it (never its name) what
    it refuses of a config (``validate``, ``check``), how to start it, how its runs are described and how its
    set-up is served. ``specbatch.backends.<engine.backend>.ENGINE`` names the class.
    """

    # engine.backend's value for this backend (its package's name under specbatch.backends).
    name: ClassVar[str]

    # Whose work ``counters`` count: "engine" (this job's engine alone), "server" (a server's, every client's) or
    # "requests" (the job's own tally of its completions).
    counters_scope = "engine"
    # Why the method's checks against this machine's checkpoints and packages (config.preflight) do not apply to
    # this backend; None: they run before the engine starts.
    preflight_skipped: str | None = None
    # True when this backend drafts with vLLM's own proposers (n-gram matcher, suffix cache), as jobs/predict.py's
    # replay does: its measured n-gram and suffix runs can be put beside the replay's prediction.
    drafts_as_vllm = False
    # True when the speculative figures come from a server (its /metrics or its answers), which may not speculate at
    # all, or miscount: no drafting at all over a shard is then "unknown", not AL 1.0 (run.summary).
    figures_from_a_server = False
    # Why a job cannot choose this backend's speculative set-up phase by phase (spec=auto), with what to do instead;
    # None: it starts an engine per set-up.
    fixed_speculation: str | None = None
    # What its tokens come from when no model sampled them (the dummy makes them up); None: a model did. A check of
    # a run against its model's distribution (jobs/check_lossless.py) has nothing to test in such a run.
    tokens_without_a_model: str | None = None

    # The settings that change acceptance silently, as the started engine resolved them
    # (specbatch.engine.acceptance_settings); None when the backend cannot tell (a server's, the dummy's).
    acceptance_settings: dict[str, Any] | None = None

    # What the last ``step`` held, set by backends that count their steps (vLLM's scheduler, the dummy); None: this
    # backend cannot tell (a server's requests are not its steps), and nothing is timed per step.
    last_step: StepLoad | None = None

    def __init__(self, fingerprint: str, concurrency: int | None = None) -> None:
        self.fingerprint = fingerprint
        # Requests the engine runs at once (its batch): engine.max_num_seqs, or the backend's own default.
        self.concurrency = concurrency
        self.startup_seconds = 0.0
        self.warmup_seconds = 0.0

    @abstractmethod
    def add(self, request: Request) -> None:
        """Queue one request. Raises RequestRefused for a request the engine will never run (only that one)."""

    @abstractmethod
    def step(self) -> list[Completion]:
        """Advance the engine (blocking until it made progress); the requests that finished meanwhile."""

    @property
    @abstractmethod
    def unfinished(self) -> int:
        """Requests added and not yet returned by ``step``."""

    @abstractmethod
    def cancel(self) -> None:
        """Drop every unfinished request (after a failure), so a shared engine starts the next job empty."""

    @classmethod
    def import_library(cls, job: JobConfig) -> None:  # noqa: B027 (a backend with nothing heavy to import keeps this)
        """Import into this process the library ``start`` builds the engine with. The executor does it before
        tracking's set-up begins on its thread (both hold the interpreter for seconds), so that ``start`` is left
        with the build, during which this process mostly waits. Nothing, unless a backend says otherwise."""
        return None

    @classmethod
    @abstractmethod
    def start(cls, job: JobConfig) -> Self:
        """Build the engine for ``job`` and warm it up (``warm_up``, when engine.warmup); the caller closes it."""

    @classmethod
    def validate(cls, job: JobConfig) -> None:
        """What this backend refuses of the job's config, and why, from the config alone (no file, no network):
        raises ConfigError naming the key to change. Run before anything is written or loaded. Here: a method that
        drafts with a checkpoint names one."""
        require_checkpoint(job)

    @classmethod
    def fingerprint_of(cls, job: JobConfig) -> str:
        """What a started engine was built from; a shared engine may only serve jobs with the same fingerprint: the
        fields that declare ``Identity.engine`` (specbatch.config.identity), and whatever else the backend builds
        its engine from."""
        return engine_identity(job)

    @classmethod
    def batch(cls, job: JobConfig) -> int | None:
        """How many requests the engine will run at once for ``job``, known before it starts (None: unknown)."""
        return job.engine.max_num_seqs

    @classmethod
    @abstractmethod
    def serve_command(cls, job: JobConfig) -> str:
        """The shell command that serves this job's set-up (its model, method and batch) on this backend's server,
        for compare's recommendation of a winner."""

    @classmethod
    def describe(cls, engine: dict[str, Any]) -> str:
        """What the MLflow run's note says about where the completions came from, from the run's recorded (masked)
        ``engine`` section; empty when there is nothing to add to the model and method."""
        return ""

    @classmethod
    def weights_label(cls, config: dict[str, Any]) -> str:
        """How a comparison names the weights a run generated with (its dtype column), from its recorded config."""
        return str(config["model"]["dtype"])

    @classmethod
    def check_method(cls, job: JobConfig) -> None:  # noqa: B027 (most backends need nothing more)
        """What this backend needs on this machine for the job's method (packages, model runners), checked beside
        the method's own checks before the engine loads; ConfigError naming the fix. Nothing, unless a backend says
        otherwise."""
        return None

    @classmethod
    def check(cls, job: JobConfig) -> None:  # noqa: B027 (most backends have nothing to check)
        """What can be checked about the backend before anything is written or loaded (e.g. a server answers);
        raises ConfigError naming the key to change. Nothing, unless a backend says otherwise."""
        return None

    def warmup(self) -> None:  # noqa: B027 (a backend without one-off costs keeps this)
        """One short request, so one-off costs stay out of the timings. Nothing, unless a backend says otherwise."""
        return None

    def warm_up(self) -> None:
        """``warmup``, ending the engine (its processes, its server connection) if it fails, so a start that fails
        at its last step leaves nothing behind."""
        try:
            self.warmup()
        except BaseException:
            self.close()
            raise

    def counters(self) -> Counters | None:
        """Cumulative engine counters, an optional capability: None when the backend has none (then the figures
        come from the per-request ones). Only differences of two snapshots mean anything."""
        return None

    def set_k_schedule(self, schedule: list[list[int]]) -> bool:
        """Change the k per batch size of the running engine (``[first, last, k]`` ranges as ``spec.k_schedule``;
        k = 0 turns speculation off there), an optional capability: False when this engine cannot change it without a
        new start (spec=auto then starts one)."""
        return False

    def close(self) -> None:  # noqa: B027 (a backend with nothing to stop keeps this)
        """Stop whatever the engine started (processes, servers). Idempotent."""
