"""spec=auto's reasoning, from figures alone (no engine, no files): predict the candidates on the pilot's rows, decide
whether measuring pays, and pick the winner by jobs/compare.py's noise rule.

- Predict: the pilot's completions are replayed through vLLM's n-gram matcher and arctic-inference's suffix cache
  (specbatch.prediction), for each n-gram and suffix candidate's acceptance; its speedup is tokens per pass over what
  a pass costs in plain steps: the costs measured in the pilot's engine at the job's batch (specbatch.auto.costs)
  when its steps were timed, else ``a + b * d`` with d the draft tokens per pass (analysis.predicted's model) and
  (a, b) the prior below. That is decoding's speedup; :func:`whole_job` weighs in the prompts' share of the time.
- Measure around the pilot (:func:`around_pilot`): what runs in the pilot's engine, the learned drafters, and
  spec=none or another engine's leader only where they could win within the prediction's error.
- Budget: measuring runs the pilot and each measured set-up for ``repeats`` slices of the job's batch (the shard's
  cut, specbatch.auto.generation, refuses it when those rows exceed ``spec.auto.budget`` of the shard's), and costs
  an engine start-up per measured set-up outside the pilot's engine: those are skipped when the start-ups exceed
  the budget of the shard's expected time at the pilot's pace.
- Decide: each measured set-up ran ``repeats`` slices, each timed on its own; speedups per slice against the
  median of spec=none's slices (else the pilot's), and analysis.recommend.pick: the highest median wins, unless a
  smaller k of its method or spec=none is within the noise (scaled MAD), which then wins (the pilot's own set-up
  wins a tie with another speculative one that needs an engine of its own: it saves the switch; one the pilot's
  engine runs with its k set in place saves nothing by losing, so the rule above decides). A slice that generated
  no tokens (its rows were error rows, e.g. placeholders) timed nothing and is left out; a set-up left with no slice
  is not measured and cannot win; a pilot left with none leaves no rate to take a speedup against, and spec=none is
  kept. Each says so.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from typing import Any

from specbatch.analysis.recommend import Measured, pick, speedup_stats, within_noise
from specbatch.auto.candidates import Candidate
from specbatch.methods import SpecMethod, spec_caption, spec_label
from specbatch.prediction.replay import Drafting, replay
from specbatch.prediction.setups import Setup, setup_of
from specbatch.prediction.turns import ReplayTurn

# What a speculative pass costs in plain decode steps, r = a + b * d, before any speculative set-up is measured here:
# the least-squares line through the fixed runs of jobs/bench.py --auto at full batch (164 rows each of
# HumanEval-edit and plain HumanEval, 2 cores of an AVX-512 EPYC, bfloat16, max_tokens=128; n-gram k 1-8 and suffix
# k 5: d from 0.5 to 5.3 draft tokens per pass, r from 1.38 to 4.02). The offset a - 1 is what turning speculation
# on costs a pass before any draft token, as analysis.predicted found on the same machines (1.33-1.44). At smaller
# batches a draft token costs less, so this prior under-predicts speculation there and leans to the smaller k or
# none: the cheaper mistake. It ranks what to measure, and picks only when measuring cannot answer; measured figures
# decide otherwise.
PRIOR_PASS_COST = (1.22, 0.56)
# Unmeasured, speculation must be predicted this much faster than spec=none to run: on those runs the prior's
# speedups were 8.5 % under to 7.9 % over the measured ones (with the engine's own tokens per pass), so a predicted
# gain below 10 % is within its error, and a wrong pick costs more than a missed one.
UNMEASURED_MARGIN = 1.1


@dataclass(frozen=True)
class Predicted:
    """A candidate replayed on the pilot's rows."""

    label: str
    acceptance_length: float
    # Draft tokens per target pass (d), and tokens per pass (tau = output / passes).
    draft_tokens_per_pass: float
    tokens_per_pass: float
    # x spec=none: the whole job's once whole_job has weighed in the prompts' share, else the decoding's.
    speedup: float
    # The decoding's alone (tokens per pass over a pass's cost), where ``speedup`` is the whole job's.
    decode_speedup: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {
            "label": self.label,
            "predicted_acceptance_length": self.acceptance_length,
            "predicted_draft_tokens_per_pass": self.draft_tokens_per_pass,
            "predicted_tokens_per_pass": self.tokens_per_pass,
            "predicted_speedup": self.speedup,
        }
        if self.decode_speedup is not None:
            out["predicted_decode_speedup"] = self.decode_speedup
        return out


def whole_job(predicted: list[Predicted], prompt_share: float) -> list[Predicted]:
    """Each decode speedup as the whole job's (Amdahl's law): ``prompt_share`` of spec=none's time goes to the prompt
    tokens (costs.prompt_share), the same whichever set-up runs. The order is kept: only the sizes change, which the
    margins (measure or not, none or not) are taken on."""
    rest = 1.0 - prompt_share
    return [replace(p, speedup=1.0 / (prompt_share + rest / p.speedup), decode_speedup=p.speedup) for p in predicted]


def earlier_bound(
    label: str, speedup: float, pilot: str, pilot_speedup: float, earlier: dict[str, tuple[float, float]]
) -> tuple[float, str]:
    """(``label``'s predicted speedup, bounded by what earlier fixed runs of this kind measured; a clause saying so or
    ""): where both ``label`` and the ``pilot`` ran before (``earlier``: label -> its tok/s and the pilot's, on the
    runs of one size, likeliest.against_pilot), their measured ratio times the pilot's predicted speedup bounds the
    prediction. Whole runs measured on rows of this kind are better evidence than the step model, which errs towards
    speculation where prompts are long (and than a few measured slices: the retrieval cell's spread 0.04-0.15 between
    slices of one set-up)."""
    if label not in earlier or label == pilot or earlier[label][1] <= 0:
        return speedup, ""
    rate, pilot_rate = earlier[label]
    bound = pilot_speedup * rate / pilot_rate
    if bound >= speedup:
        return speedup, ""
    return bound, (
        f"; predicted {speedup:.2f}x, bounded to {bound:.2f}x by earlier runs of this kind ({label} "
        f"{rate:.1f} tok/s, {pilot} {pilot_rate:.1f})"
    )


def replay_setup(candidate: Candidate) -> Setup:
    """The replay's set-up for an n-gram or suffix candidate, with its own knobs."""
    spec = candidate.spec
    k = spec.k
    assert k is not None and candidate.predictable
    # The recorded config's reader, on the candidate's spec: one place turns a spec into its replay.
    setup = setup_of({"spec": vars(spec)})
    assert setup is not None
    return setup


def predict(
    turns: list[ReplayTurn],
    candidates: list[Candidate],
    max_model_len: int,
    concurrency: int | None,
    pass_cost: Callable[[float], float] | None = None,
) -> list[Predicted]:
    """The predictable candidates replayed on ``turns``, fastest predicted first (ties: the smaller k). A pass
    verifying d draft tokens per request costs ``pass_cost(d)`` plain steps (the costs measured in the pilot's
    engine at the job's batch), else PRIOR_PASS_COST's line."""
    out: list[Predicted] = []
    generated = sum(len(t.completion) for t in turns)
    if not generated:
        return out  # no completion to replay (e.g. every pilot row an error row): nothing is predicted
    for candidate in candidates:
        if not candidate.predictable:
            continue
        total = Drafting()
        for _, figures in replay(turns, replay_setup(candidate), max_model_len, {0: concurrency}):
            total.add(figures)
        accepted = total.accepted + total.expected_unverified_accepted()
        passes = max(generated - accepted, 1.0)
        tau = generated / passes if generated else 1.0
        d = total.draft_tokens / passes
        a, b = PRIOR_PASS_COST
        cost = pass_cost(d) if pass_cost is not None else a + b * d
        al = 1 + accepted / total.drafts if total.drafts else 1.0
        out.append(Predicted(candidate.label, al, d, tau, tau / cost))
    out.sort(key=lambda p: (-p.speedup, p.label))
    return out


def around_pilot(
    pilot: Candidate,
    candidates: list[Candidate],
    predicted: list[Predicted],
    measure_top: int,
    slots: int,
    shares_engine: Callable[[str], bool],
    ruled_out: dict[str, str],
    pays_off: Callable[[str, float], str | None] = lambda label, speedup: None,
) -> tuple[list[str], list[str]]:
    """(the set-ups measured after a pilot on ``pilot``, in the order they run; a sentence on each one left out).

    - the predicted leaders (``measure_top``) that run in the pilot's engine (``shares_engine``: its k set in place):
      no start-up;
    - every learned drafter (replay cannot predict it) in its own engine, unless ``ruled_out`` says an earlier run of
      this kind measured it too slow to win;
    - a leader that needs an engine of its own only where it could win within the prediction's error: predicted at
      least 1/UNMEASURED_MARGIN of the best the pilot's engine can run;
    - spec=none, in its own engine, only where it could win within that error: no candidate predicted
      UNMEASURED_MARGIN x spec=none or more. Last, so that a none that wins keeps its engine.

    A predicted one is measured only where what it could gain pays for measuring it: ``pays_off(label, predicted
    speedup)`` says why not (None: it pays). At most ``slots`` of them (the shard's cut): the ones that need no
    start-up first, then none, the learned drafters and the other leaders."""
    by_label = {c.label: c for c in candidates}
    leaders = [p for p in predicted[:measure_top] if p.label != pilot.label]
    notes = []

    def paying(label: str, speedup: float) -> bool:
        why_not = pays_off(label, speedup)
        if why_not is not None:
            notes.append(f"{label} is not measured: {why_not}")
        return why_not is None

    in_place = [p.label for p in leaders if shares_engine(p.label) and paying(p.label, p.speedup)]
    own = [p.speedup for p in predicted if shares_engine(p.label) or p.label == pilot.label]
    if pilot.method is SpecMethod.none:
        own.append(1.0)  # spec=none's own pace: a leader predicted beyond the error below it cannot win
    others = []
    for p in leaders:
        if shares_engine(p.label):
            continue
        if own and p.speedup * UNMEASURED_MARGIN < max(own):
            notes.append(
                f"{p.label} is not measured: predicted {p.speedup:.2f}x spec=none, beyond the error below "
                f"{max(own):.2f}x of what the pilot's engine runs"
            )
        elif paying(p.label, p.speedup):
            others.append(p.label)
    learned = []
    for c in candidates:
        if c.predictable or c.method is SpecMethod.none or c.label == pilot.label:
            continue
        if c.label in ruled_out:
            notes.append(f"{c.label} is not measured: {ruled_out[c.label]}")
        else:
            learned.append(c.label)
    best = predicted[0].speedup if predicted else None
    none = []
    if pilot.method is not SpecMethod.none:
        if best is None or (best < UNMEASURED_MARGIN and paying("none", 1.0)):
            none = ["none"]
        elif best >= UNMEASURED_MARGIN:
            notes.append(
                f"spec=none is not measured: {predicted[0].label} is predicted {best:.2f}x it, beyond the "
                f"prediction's error ({UNMEASURED_MARGIN:g}x)"
            )
    priority = [*in_place, *none, *learned, *others]
    kept = priority[:slots]
    for label in priority[slots:]:
        notes.append(f"{label} is not measured: the shard's cut has {slots} measured slot(s)")
    order = [label for label in [*in_place, *learned, *others, *none] if label in kept]
    assert all(label in by_label for label in order)
    return order, notes


def slower_before(earlier: dict[str, tuple[float, float]], margin: float = 1.0) -> list[str]:
    """The set-ups earlier fixed runs of this kind made no faster than the pilot's, or than ``margin`` times it
    (``earlier``: as :func:`earlier_bound`'s)."""
    return sorted(label for label, (rate, pilot_rate) in earlier.items() if rate <= pilot_rate * margin)


def switchable(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """The plan's predictions an unmeasured choice may switch to: not the set-ups earlier whole runs of this kind
    made no faster than the pilot's (the plan's ``slower_before``), which the step model alone does not overrule."""
    slower = set(plan.get("slower_before") or [])
    return [p for p in plan["predicted"] if p["label"] not in slower]


def measuring_gain(
    rest_seconds: float, best_here: float, speedup: float, margin: float, cost_seconds: float
) -> str | None:
    """Whether measuring a set-up predicted ``speedup`` (x spec=none) can pay, against the best the pilot's engine
    runs (``best_here``): at its most (the prediction off by ``margin`` in its favour) it saves ``rest_seconds x (1 -
    best_here / (speedup x margin))`` of the rest, which must exceed what measuring it costs (``cost_seconds``: its
    slices' time below the full batch, and the engine start-ups it needs). None when it pays; else why not."""
    gain = rest_seconds * (1 - best_here / (speedup * margin))
    if gain > cost_seconds:
        return None
    error = f"{margin:g}x error in its favour" if margin > 1.0 else "no error in its favour"
    return (
        f"at most {max(gain, 0.0):.1f} s to gain over the rest (predicted {speedup:.2f}x spec=none against "
        f"{best_here:.2f}x in the pilot's engine, {error}), not more than the {cost_seconds:.1f} s measuring it costs"
    )


def measured_slots(candidates: list[Candidate], measure_top: int) -> int:
    """How many set-ups are measured (known before the pilot: how the shard's first rows are cut)."""
    predictable = sum(1 for c in candidates if c.predictable)
    unpredicted = sum(1 for c in candidates if not c.predictable and c.method is not SpecMethod.none)
    return min(measure_top, predictable) + unpredicted


def measuring_pays(
    startups: int, startup_seconds: float, pilot_seconds: float, pilot_rows: int, shard_rows: int, budget: float
) -> tuple[bool, str]:
    """Whether ``startups`` engine start-ups of ``startup_seconds`` fit in ``budget`` of the shard's expected time
    (its rows at the pilot's pace, plus one start-up), and the sentence that says so."""
    expected = startup_seconds + pilot_seconds * shard_rows / max(pilot_rows, 1)
    cost = startups * startup_seconds
    share = cost / expected if expected > 0 else float("inf")
    verdict = "fits in" if share <= budget else "exceeds"
    why = (
        f"measuring {startups} set-up(s) costs {startups} engine start-up(s), {cost:.0f} s, {share:.0%} of this "
        f"shard's expected {expected:.0f} s at the pilot's pace: that {verdict} spec.auto.budget={budget:g}"
    )
    return share <= budget, why


def unmeasured_winner(predicted: list[tuple[str, float]]) -> tuple[str, str]:
    """(winner, why) when nothing is measured, from (label, predicted speedup) fastest first: the best prediction
    when it is predicted faster than none by more than the prior's error (UNMEASURED_MARGIN)."""
    if predicted and predicted[0][1] >= UNMEASURED_MARGIN:
        label, speedup = predicted[0]
        return label, f"{label} has the best predicted speedup, {speedup:.2f}x (not measured)"
    return "none", (
        f"no candidate is predicted at least {UNMEASURED_MARGIN:g}x spec=none, beyond the prior's error (not measured)"
    )


def _measured(label: str, speedups: list[float]) -> Measured:
    method, _, k = label.partition("-k")
    median, spread = speedup_stats(speedups)
    return Measured(method, int(k) if k else None, median, spread, len(speedups))


def decide(
    rates: dict[str, list[float]], pilot: str = "none", in_pilots_engine: Collection[str] = ()
) -> tuple[str, str, dict[str, dict[str, Any]]]:
    """(winner, why, figures per label) from each measured set-up's tok/s per slice; ``rates[pilot]`` is the
    pilot's. Speedups per slice are taken against the median of spec=none's slices when none was measured, else of
    the pilot's (analysis.recommend; the figures say which); slices of 0 tok/s generated nothing and are left out
    (module docstring), and why names the set-ups that lost slices so. The pilot's set-up wins a tie with a
    speculative winner that needs a switch; not with one of ``in_pilots_engine`` (the set-ups the pilot's engine
    runs with its k set in place): switching to it is free, so pick's own rule stands (the smaller k, or none,
    within the noise). The bench's HumanEval-edit cell at batch 16, rounds 5 and 6: the pilot n-gram k 8 kept its
    set-up against k 5, measured 1.02x and 1.04x it in the pilot's own engine within a slice spread of 0.12-0.14."""
    timed = {label: [r for r in values if r > 0] for label, values in rates.items()}
    empty = {
        label: len(rates[label]) - len(values) for label, values in timed.items() if len(values) < len(rates[label])
    }
    reference = "none" if "none" in timed else pilot
    if not timed.get(reference):
        why = "the pilot's slices generated no tokens: no rate to take a speedup against, so none is kept"
        return "none", why, {}
    base_rate = statistics.median(timed[reference])
    speedups = {label: [r / base_rate for r in values] for label, values in timed.items() if values}
    baseline = None
    if reference == "none":
        # The baseline's median speedup is 1 by construction; its spread is its own slices' movement.
        own = _measured("none", speedups.pop("none"))
        baseline = Measured("none", None, 1.0, own.spread, own.repeats)
    measured = [_measured(label, values) for label, values in speedups.items()]
    chosen, best = pick(measured, baseline)
    stay = next((m for m in measured if spec_label(m.method, m.k) == pilot), None)
    switch = chosen.method != "none" and spec_label(chosen.method, chosen.k) not in in_pilots_engine
    if stay is not None and chosen is not stay and switch and within_noise(best, stay):
        chosen = stay
    winner = spec_label(chosen.method, chosen.k)
    if chosen is best:
        against = _against(reference)
        why = f"{chosen.caption} measured fastest: {chosen.median:.2f}x {against} (spread {chosen.spread:.2f})"
    else:
        why = (
            f"{best.caption} measured fastest ({best.median:.2f}x {_against(reference)}, spread {best.spread:.2f}) "
            f"but {spec_caption(chosen.method, chosen.k)} is within its noise ({chosen.median:.2f}x): "
            + (
                "the pilot's set-up, which needs no switch, wins a tie"
                if chosen is stay
                else "the smaller k, or none, wins a tie"
            )
        )
    for label, count in empty.items():
        if timed[label]:
            why += f"; {count} of {label}'s {len(rates[label])} slices generated no tokens and are left out"
        else:
            why += f"; {label}'s slices generated no tokens: not measured, it cannot win"
    figures = {
        spec_label(m.method, m.k): {
            "speedup": m.median,
            "spread": m.spread,
            "repeats": m.repeats,
            "against": reference,
        }
        for m in [*([baseline] if baseline else []), *measured]
    }
    return winner, why, figures


def _against(reference: str) -> str:
    return "spec=none" if reference == "none" else f"the pilot's {reference}"


def candidate_rows(
    candidates: list[Candidate],
    predicted: list[dict[str, Any]],
    rates: dict[str, list[float]],
    figures: dict[str, dict[str, Any]],
    no_tokens: dict[str, str | None],
) -> list[dict[str, Any]]:
    """decision.json's table: each candidate's prediction (the plan's), its measured tok/s per slice and their
    median, its speedup and spread (decide's figures), and what its slices of no tokens say (None: none)."""
    by_label = {p["label"]: p for p in predicted}
    rows = []
    for candidate in candidates:
        label = candidate.label
        own = rates.get(label) or []
        timed = [r for r in own if r > 0]  # as decide() reads them
        rows.append(
            {
                "setup": label,
                "caption": candidate.caption,
                "predicted_acceptance_length": by_label.get(label, {}).get("predicted_acceptance_length"),
                "predicted_speedup": by_label.get(label, {}).get("predicted_speedup"),
                # Decoding's alone, where predicted_speedup is the whole job's (whole_job).
                "predicted_decode_speedup": by_label.get(label, {}).get("predicted_decode_speedup"),
                "measured_tok_s": statistics.median(timed) if timed else None,
                "slices_tok_s": own,
                "speedup": figures.get(label, {}).get("speedup"),
                "spread": figures.get(label, {}).get("spread"),
                "no_tokens": no_tokens.get(label),
            }
        )
    return rows
