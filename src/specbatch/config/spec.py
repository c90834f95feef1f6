"""The ``spec`` section: which speculative method runs, with its k and its own knobs (group ``spec/``).

Which knob belongs to which method, and each method's rules about its own knobs, come from its module in
:mod:`specbatch.methods`; this module checks the values. Each backend's method table turns them into its flags
(vLLM's ``speculative_config``: ``specbatch.backends.vllm.vllm_args``).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from dataclasses import dataclass, field
from typing import Any

from specbatch.common.errors import ConfigError, require
from specbatch.config.declarations import ABSENT_WHEN_NULL, OLD_RUNS_DEFAULT
from specbatch.methods import AUTO_DEFAULT_CANDIDATES, METHODS, SpecMethod, methods_owning, spec_caption, spec_label


class DraftSampleMethod(enum.StrEnum):
    """How a draft model picks its proposals (vLLM 0.32 ``draft_sample_method``)."""

    greedy = "greedy"
    probabilistic = "probabilistic"


class RejectionSampleMethod(enum.StrEnum):
    """How the target verifies the drafted tokens (vLLM 0.32 ``rejection_sample_method``): ``standard`` token by
    token; ``block`` (Sun et al., block verification) the k drafts jointly, lossless as well and accepting at least as
    many. vLLM's third value, ``synthetic``, accepts at given rates without looking at the tokens: a simulation, not
    a verification, so it is not a value here."""

    standard = "standard"
    block = "block"


# vLLM accepts larger k, but beyond this every method spends more on rejected drafts than it saves.
MAX_SPECULATIVE_TOKENS = 16
# Fields of every method (k means nothing to the baseline, which the k check says itself); the others are knobs.
_SHARED_FIELDS = ("method", "num_speculative_tokens", "k_schedule")
# How a k schedule is written, for messages.
SCHEDULE_EXAMPLE = "spec.k_schedule=[[1,4,5],[5,16,3],[17,256,0]]"

# spec=auto's default candidates (the methods' modules name their k): re-exported for the callers of this module.
__all__ = ["AUTO_DEFAULT_CANDIDATES", "AutoConfig", "DraftSampleMethod", "RejectionSampleMethod", "SpecConfig"]


@dataclass
class AutoConfig:
    """spec=auto: which set-ups the job may choose from, and how much of the job the choosing may cost
    (specbatch.auto; docs/auto.md)."""

    # Set-ups as run folders name them: none, <method>-k<k> (ngram-k3, suffix-k5, eagle3-k3); a checkpoint method
    # needs its entry in spec.auto.checkpoints. null: AUTO_DEFAULT_CANDIDATES and every method of checkpoints at its
    # own k.
    candidates: list[str] | None = None
    # Checkpoint method -> its spec knobs (model, and e.g. parallel_drafting, num_speculative_tokens), as
    # conf/model_spec/<model>_<method>.yaml pairs them; conf/model_spec/<model>_auto.yaml lists the model's.
    checkpoints: dict[str, Any] = field(default_factory=dict)
    # Rows generated with the pilot's set-up first (kept as output) when nothing is measured: the rows the replay
    # predicts on.
    pilot_rows: int = 16
    # How many predicted leaders are measured for real, besides the checkpoint methods (which replay cannot
    # predict). 0: run the best prediction without measuring.
    measure_top: int = 2
    # A measurement is `repeats` slices of `slice_rows` rows per set-up (the pilot's too), each streamed and timed on
    # its own: the repeats whose median and spread jobs/compare.py's noise rule reads (analysis.recommend). null: the
    # job's batch (engine.max_num_seqs, or the backend's default), so that what is measured is the job's batch.
    slice_rows: int | None = None
    repeats: int = 3
    # The largest share of the shard the choosing may cost: the rows of the pilot and of the measurements, and the
    # engine start-ups of the measured set-ups against the shard's expected time at the pilot's pace. Beyond it the
    # best prediction (or none) runs without measuring.
    budget: float = 0.25
    # The set-up the pilot runs (one of the candidates, e.g. none); null: the likeliest winner, from earlier runs of
    # the same kind, else the prior (specbatch.auto.likeliest). Left out of the digests while null.
    pilot: str | None = field(default=None, metadata={ABSENT_WHEN_NULL: True})
    # null: a predicted set-up is measured only where what it could gain over the rest pays for measuring it
    # (specbatch.auto.decision.measuring_gain); true: every leader that could win within the prediction's error, as
    # measure_top says (an audit of the prediction, or a test of the measuring itself). Left out of the digests
    # while null.
    always_measure: bool | None = field(default=None, metadata={ABSENT_WHEN_NULL: True})

    def __post_init__(self) -> None:
        for key in ("pilot_rows", "repeats"):
            value = getattr(self, key)
            require(value >= 1, f"spec.auto.{key}={value} must be 1 or more")
        require(
            self.slice_rows is None or self.slice_rows >= 1,
            f"spec.auto.slice_rows={self.slice_rows} must be 1 or more (or null for the job's batch)",
        )
        require(self.measure_top >= 0, f"spec.auto.measure_top={self.measure_top} must be 0 or more")
        require(
            0 <= self.budget <= 1,
            f"spec.auto.budget={self.budget} is a share of the job's time: use a number in [0, 1], e.g. 0.25",
        )
        require(
            self.candidates is None or len(self.candidates) >= 1,
            "spec.auto.candidates is empty: list at least one set-up, e.g. [none,ngram-k3], or null for the defaults",
        )
        for method, knobs in self.checkpoints.items():
            require(
                isinstance(knobs, dict) and bool(knobs.get("model")),
                f"spec.auto.checkpoints.{method}={knobs!r} must give the draft's spec knobs with at least its model, "
                f"e.g. spec.auto.checkpoints.{method}.model=<folder or hub id>",
            )


@dataclass
class SpecConfig:
    """Speculative decoding method and its own knobs (group ``spec/``).

    Which checkpoint goes with which target is not here: conf/model_spec/<model>_<spec>.yaml sets spec.model
    for the selected model, and ``spec.model=...`` on the command line always wins.
    """

    method: SpecMethod = SpecMethod.none
    # Tokens proposed per step (k); null only for method=none.
    num_speculative_tokens: int | None = None
    # Checkpoint methods (specbatch.methods.CHECKPOINT_KIND): the draft checkpoint or head (local folder or hub id).
    model: str | None = None
    # Hub revision of spec.model.
    revision: str | None = None
    # Model-based methods: GPUs the draft runs on; vLLM accepts 1 or the target's tensor_parallel_size.
    draft_tensor_parallel_size: int | None = None
    # draft_model / eagle / eagle3: draft all k tokens in one pass (PARD drafts, P-EAGLE heads: checkpoints trained
    # for it, whose config.json names the mask token). null: off, as vLLM's default. Left out of digests while null.
    parallel_drafting: bool | None = field(default=None, metadata={ABSENT_WHEN_NULL: True})
    # Model-based methods: greedy or probabilistic proposals (null: vLLM's default, greedy).
    draft_sample_method: DraftSampleMethod | None = None
    # Every drafting method: how the target verifies the drafts, standard or block (null: vLLM's default,
    # standard). Left out of the digests while null, so runs written before it keep their folders.
    rejection_sample_method: RejectionSampleMethod | None = field(default=None, metadata={ABSENT_WHEN_NULL: True})
    # draft_model: a draft with another tokenizer than the target's (vLLM maps its tokens to the target's by their
    # text); greedy drafts only. null: off. Left out of the digests while null.
    use_heterogeneous_vocab: bool | None = field(default=None, metadata={ABSENT_WHEN_NULL: True})
    # DSpark: evaluate its Markov head only on the top-k candidates of the base logits (Qwen3 DSpark drafts, draft
    # on one GPU). null: the checkpoint's own dspark_draft_topk, or all. Left out of the digests while null.
    dspark_draft_topk: int | None = field(default=None, metadata={ABSENT_WHEN_NULL: True})
    # n-gram (prompt lookup): shortest and longest suffix of the context looked up in the prompt.
    prompt_lookup_min: int | None = None
    prompt_lookup_max: int | None = None
    # Suffix decoding (arctic-inference): tree depth, finished requests remembered, how far to speculate
    # relative to the matched length, and the least probability a drafted token may have.
    suffix_decoding_max_tree_depth: int | None = None
    suffix_decoding_max_cached_requests: int | None = None
    suffix_decoding_max_spec_factor: float | None = None
    suffix_decoding_min_token_prob: float | None = None
    # spec=simulate (specbatch.methods.simulate): the acceptance profile the target runs at, as vLLM's per-position
    # rates (the chance the draft is accepted up to there), or a speculation_profile.json that fills them; and the
    # share of steps that draft (null: every step, or the profile's). Left out of the digests while null.
    synthetic_acceptance_rates: list[float] | None = field(default=None, metadata={ABSENT_WHEN_NULL: True})
    profile: str | None = field(default=None, metadata={ABSENT_WHEN_NULL: True})
    draft_coverage: float | None = field(default=None, metadata={ABSENT_WHEN_NULL: True})
    # A k per batch size instead of one k: [[first batch size, last batch size, k], ...], ranges contiguous from 1,
    # k=0 where speculation should stop; vLLM's num_speculative_tokens_per_batch_size. Sets num_speculative_tokens
    # to its largest k (vLLM caps every k of a schedule at it). Typed loosely so the checks below word the errors.
    # Left out of the digests while null, so runs written before it keep their folders.
    k_schedule: list[Any] | None = field(default=None, metadata={ABSENT_WHEN_NULL: True, OLD_RUNS_DEFAULT: None})
    # spec=auto's own knobs (AutoConfig); null for every other method, and then left out of the digests.
    auto: AutoConfig | None = field(default=None, metadata={ABSENT_WHEN_NULL: True})

    def __post_init__(self) -> None:
        if self.k_schedule is not None:
            self._take_k_from_schedule()
        fills_k = METHODS[self.method].fills_k
        if self.num_speculative_tokens is None and fills_k is not None:
            fills_k(self)
        k = self.num_speculative_tokens
        if self.method is SpecMethod.none:
            require(
                k is None,
                "spec.num_speculative_tokens is set but spec.method=none drafts nothing: "
                "drop the override or choose a method, e.g. spec=ngram",
            )
        elif self.method is SpecMethod.auto:
            require(
                k is None,
                "spec.num_speculative_tokens is set but spec=auto measures each candidate at its own k: drop it and "
                "list the k to try in spec.auto.candidates, e.g. [none,ngram-k2,ngram-k5]",
            )
            require(self.auto is not None, "spec.method=auto needs its knobs (spec.auto): select it with spec=auto")
        else:
            require(
                k is not None and 1 <= k <= MAX_SPECULATIVE_TOKENS,
                f"spec.num_speculative_tokens={k} is out of range for spec.method={self.method.value}: "
                f"use an integer from 1 to {MAX_SPECULATIVE_TOKENS}, e.g. spec.num_speculative_tokens=3",
            )
        self._check_own_knobs()
        for check in METHODS[self.method].knob_checks:
            check(self)
        tp = self.draft_tensor_parallel_size
        require(
            tp is None or tp >= 1,
            f"spec.draft_tensor_parallel_size={tp} must be 1 or more (or null for vLLM's default)",
        )
        if self.model is not None:
            require(bool(self.model.strip()), "spec.model is empty: set it to a folder or hub id, or to null")

    def _take_k_from_schedule(self) -> None:
        """Check spec.k_schedule on its own (coverage of engine.max_num_seqs is JobConfig's) and derive k from it."""
        method = self.method
        require(
            method is not SpecMethod.none,
            "spec.k_schedule is set but spec.method=none drafts nothing: drop spec.k_schedule or choose a method "
            "that follows it, e.g. spec=ngram",
        )
        refusal = METHODS[method].k_schedule_refusal
        if refusal is not None:
            followers = ", ".join(
                m.value for m, e in METHODS.items() if m is not SpecMethod.none and not e.k_schedule_refusal
            )
            raise ConfigError(
                f"spec.k_schedule is not followed for spec.method={method.value}: {refusal}. Drop spec.k_schedule "
                f"and set one spec.num_speculative_tokens, or use a method that follows schedules ({followers})"
            )
        schedule = parse_k_schedule(self.k_schedule)
        top = max(k for _, _, k in schedule)
        require(
            top >= 1,
            "spec.k_schedule has k=0 at every batch size, which is no speculation at all: use spec=none",
        )
        # vLLM caps every k of the schedule at num_speculative_tokens (and sizes its buffers by it): it must be the
        # schedule's largest k. Derived rather than asked for twice, so the schedule alone says what runs.
        self.num_speculative_tokens = top
        self.k_schedule = [list(entry) for entry in schedule]

    @property
    def schedule(self) -> list[tuple[int, int, int]] | None:
        """spec.k_schedule as checked triples (None: one k at every batch size)."""
        return None if self.k_schedule is None else [(a, b, c) for a, b, c in self.k_schedule]

    @classmethod
    def knob_applies(cls, method: SpecMethod, knob: str) -> bool:
        """Whether ``spec.<knob>`` means anything for ``method`` (k means nothing to the baseline; a k schedule
        nothing to a method vLLM does not follow it for)."""
        if knob == "num_speculative_tokens":
            return method not in (SpecMethod.none, SpecMethod.auto)
        if knob == "k_schedule":
            return method not in (SpecMethod.none, SpecMethod.auto) and METHODS[method].k_schedule_refusal is None
        owners = knob_owners().get(knob)
        return owners is None or method in owners

    def _check_own_knobs(self) -> None:
        for knob, owners in knob_owners().items():
            if self.method not in owners and getattr(self, knob) is not None:
                names = ", ".join(sorted(m.value for m in owners))
                hint = METHODS[self.method].foreign_knob_hints.get(knob)
                if hint is None:
                    hint = f"remove it or choose one of those methods (spec={sorted(m.value for m in owners)[0]})"
                raise ConfigError(
                    f"spec.{knob} is not an option of spec.method={self.method.value} (it belongs to {names}): {hint}"
                )

    @property
    def k(self) -> int | None:
        return self.num_speculative_tokens

    @property
    def label(self) -> str:
        """Readable method label, e.g. ``ngram-k3``, ``none`` or ``ngram-sched-1to4k5-5to256k0``."""
        return spec_label(self.method.value, self.k, self.schedule)

    @property
    def caption(self) -> str:
        """The method as tables write it, e.g. ``ngram k=3`` or ``ngram k schedule 1-4:5 5-256:0``."""
        return spec_caption(self.method.value, self.k, self.schedule)


def parse_k_schedule(value: Any) -> list[tuple[int, int, int]]:
    """spec.k_schedule as ``(first, last, k)`` triples, checked: integers, ranges ascending from batch size 1 with no
    gap and no overlap, every k in 0..MAX_SPECULATIVE_TOKENS. Raises ConfigError naming the key and the fix."""
    shape = f"a list of [first batch size, last batch size, k] triples, e.g. {SCHEDULE_EXAMPLE}"
    if not isinstance(value, list | tuple) or not value:
        raise ConfigError(f"spec.k_schedule={value!r} is not {shape} (or null for one k at every batch size)")
    triples: list[tuple[int, int, int]] = []
    for i, entry in enumerate(value):
        whole = isinstance(entry, list | tuple) and len(entry) == 3
        if not whole or not all(isinstance(x, int) and not isinstance(x, bool) for x in entry):
            raise ConfigError(
                f"spec.k_schedule[{i}]={entry!r} is not a [first batch size, last batch size, k] triple of integers: "
                f"write {shape}"
            )
        first, last, k = (int(x) for x in entry)
        where = f"spec.k_schedule[{i}]=[{first},{last},{k}]"
        require(first >= 1, f"{where}: batch sizes start at 1; write the first range as [1,...]")
        require(first <= last, f"{where}: batch sizes {first}..{last} is an empty range; write first <= last")
        require(
            0 <= k <= MAX_SPECULATIVE_TOKENS,
            f"{where}: k={k} is out of range: use 0 (no speculation at those batch sizes) to {MAX_SPECULATIVE_TOKENS}",
        )
        triples.append((first, last, k))
    if triples != sorted(triples):
        ordered = ",".join(f"[{a},{b},{c}]" for a, b, c in sorted(triples))
        raise ConfigError(f"spec.k_schedule's ranges are not in ascending order: sort them, e.g. [{ordered}]")
    out: list[tuple[int, int, int]] = []
    for i, (first, last, k) in enumerate(triples):
        where = f"spec.k_schedule[{i}]=[{first},{last},{k}]"
        expected = out[-1][1] + 1 if out else 1
        if first < expected:
            raise ConfigError(
                f"{where} overlaps spec.k_schedule[{i - 1}]={list(out[-1])}: ranges must not overlap; start it at "
                f"{expected} (e.g. [{expected},{max(last, expected)},{k}])"
            )
        if first > expected:
            rule = (
                "the first range starts at 1 (vLLM needs a k for every batch size)"
                if not out
                else f"each range starts right after the one before (spec.k_schedule[{i - 1}] ends at {expected - 1})"
            )
            raise ConfigError(
                f"{where} leaves batch sizes {expected}..{first - 1} without a k: {rule}; "
                f"write [{expected},{last},{k}]"
            )
        out.append((first, last, k))
    return out


def schedule_must_cover(schedule: list[tuple[int, int, int]], batch: int, why: str) -> None:
    """The schedule reaches ``batch`` (the largest batch size the engine can run; ``why`` says where it comes from),
    so no batch size falls back to vLLM's silent carry-forward of the last k."""
    last = schedule[-1][1]
    if last < batch:
        a, _, k = schedule[-1]
        raise ConfigError(
            f"spec.k_schedule ends at batch size {last} but {why}: extend its last range to {batch} "
            f"([{a},{batch},{k}], or add [{last + 1},{batch},<k>]) or set engine.max_num_seqs={last}"
        )


@functools.cache
def knob_owners() -> dict[str, frozenset[SpecMethod]]:
    """Each optional ``spec.<knob>`` → the methods it belongs to, in the schema's field order (so messages and the
    ``speculative_config`` list knobs the way the schema does)."""
    return {f.name: methods_owning(f.name) for f in dataclasses.fields(SpecConfig) if f.name not in _SHARED_FIELDS}
