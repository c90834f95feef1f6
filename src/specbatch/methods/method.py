"""What one speculative method is, as its module declares it, and what its checks may read of the job.

A method knows its knobs, its defaults, what it needs (a checkpoint, a GPU), its checks before loading and its CPU
stand-in; it does not know any backend. Each backend translates methods in a table of its own
(``specbatch.backends.<name>.methods``) and refuses the ones it does not list.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol


class ModelPart(Protocol):
    """The target as a check reads it (specbatch.config.ModelConfig)."""

    path: str
    revision: str | None
    max_model_len: int


class SamplingPart(Protocol):
    max_tokens: int


class JobLike(Protocol):
    """The job as a method's check reads it (specbatch.config.JobConfig, which methods may not import):
    ``spec`` is the SpecConfig, read by its knob names."""

    @property
    def spec(self) -> Any: ...
    @property
    def model(self) -> ModelPart: ...
    @property
    def sampling(self) -> SamplingPart: ...


# A check before loading: raises ConfigError naming the key and the fix (or warns), reading only the job.
Check = Callable[[JobLike], None]
# A check of the method's own knob values from the config alone (SpecConfig.__post_init__), given the spec.
KnobCheck = Callable[[Any], None]


@dataclass(frozen=True)
class Method:
    """What one method needs. Its number of speculative tokens (k) is every method's but the roles' (none, auto)."""

    # Its spec.method value (the module's name).
    name: str
    # Where it sits in lists and messages (the enum's order): baseline first, the chooser last.
    rank: int
    # spec.<knob>s that mean something for this method besides k; setting any other is refused, not ignored.
    knobs: tuple[str, ...] = ()
    # What its separate draft checkpoint (spec.model) is called in messages; None: it drafts without one.
    checkpoint: str | None = None
    # Checks run before the engine starts, in this order (on the machine that loads the model).
    checks: tuple[Check, ...] = ()
    # Checks of its own knob values, run when the config is built.
    knob_checks: tuple[KnobCheck, ...] = ()
    # Fills a null k from its own knobs before k is checked (spec=simulate: the profile's k, or one per rate given).
    fills_k: KnobCheck | None = None
    # spec.<knob> -> what to say instead of the generic advice when that knob of another method is set for it.
    foreign_knob_hints: dict[str, str] = field(default_factory=dict)
    # Why a k per batch size (spec.k_schedule) is not followed for it; None: it is. Refused when the config is
    # built, before any backend is chosen (and a sweep drops the knob for it), so it is the method's fact.
    k_schedule_refusal: str | None = None
    # The tiny random checkpoint its CPU tests use (a member of specbatch.assets.tiny's family), when it has one.
    stand_in: str | None = None
    # "module:Class" of the set-up prediction replays it with (specbatch.prediction); None: replay cannot predict it.
    replay: str | None = None
    # The k spec=auto tries it at by default (none of them: it is not a default candidate).
    auto_default_ks: tuple[int, ...] = ()
    # Its draft at k = n is the first n tokens of its draft at k = n + 1, one token per pass, so the acceptance
    # measured at one k gives the acceptance length at every smaller k (NVIDIA ModelOpt's speculation profile says
    # "chain_analytic"; a method that re-plans its block or tree when k changes is measured at each k).
    chain_drafting: bool = False
    # It runs the target at a given acceptance instead of verifying real drafts: its rows' text is not a real output,
    # so it is never checked token for token against the baseline, nor recommended (specbatch.methods.simulate).
    simulated: bool = False


# The draft checkpoint and its hub revision (methods with a separate checkpoint).
CHECKPOINT_KNOBS = ("model", "revision")
# How a neural drafter runs (a draft, a head, or the target's own MTP layers).
DRAFTER_KNOBS = ("draft_tensor_parallel_size", "draft_sample_method")
# How the target verifies the drafts: every drafting method's (vLLM's rejection sampler is one for all).
VERIFY_KNOBS = ("rejection_sample_method",)
# Drafters vLLM 0.32 can run in parallel-drafting mode ("Only compatible with EAGLE and draft model methods").
PARALLEL_KNOBS = ("parallel_drafting",)
# Block drafters always draft their block in one pass (vLLM 0.32 turns parallel drafting on for them itself).
ALWAYS_PARALLEL = {
    "parallel_drafting": "it always drafts its whole block in one pass (vLLM turns that on itself): remove "
    "spec.parallel_drafting"
}
