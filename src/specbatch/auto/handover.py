"""What spec=auto does around the hand-over, from the steps it timed: the choice per batch occupancy once the pilot
is in (specbatch.auto.schedule, with specbatch.auto.costs fitted on the pilot's steps), and the check that sends the
rest of a shard back to spec=none when the winner turns out slower (specbatch.auto.check).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specbatch.auto.candidates import Candidate, scheduled
from specbatch.auto.check import SwitchCheck
from specbatch.auto.costs import StepCosts
from specbatch.auto.schedule import Choice, Option, caption, choose
from specbatch.methods import SpecMethod
from specbatch.prediction.turns import ReplayTurn
from specbatch.run.folder import RunFolder
from specbatch.run.records.decision_file import create_switch
from specbatch.run.records.steps_file import StepTable, read_all_steps
from specbatch.run.step_log import StepLog

log = logging.getLogger(__name__)

# The check runs every this many steps of the winner's stream (it reads the steps timed since it last ran).
CHECK_EVERY = 16


@dataclass(frozen=True)
class Occupancy:
    """The choice per batch occupancy, as the decision records it."""

    choice: Choice
    costs: StepCosts
    winner: Candidate | None

    @property
    def label(self) -> str:
        return self.winner.label if self.winner is not None else "none"

    @property
    def caption(self) -> str:
        if self.winner is None:
            return "none"
        spec = self.winner.spec
        return caption(spec.method.value, spec.k_schedule, spec.k)

    def record(self) -> dict[str, Any]:
        """The keys the decision gains: the schedule, its predicted speedup per bucket, and the costs it used."""
        spec = self.winner.spec if self.winner is not None else None
        return {
            "k_schedule": spec.k_schedule if spec is not None else None,
            "schedule": self.choice.buckets,
            "predicted_speedup": self.choice.predicted_speedup,
            "costs": self.costs.to_dict(),
        }


def lengths_of(turns: list[ReplayTurn], kept: int = 64) -> list[float]:
    """The completions' lengths in tokens, as at most ``kept`` evenly spaced quantiles (what a plan keeps of them)."""
    lengths = sorted(float(len(t.completion)) for t in turns)
    if len(lengths) <= kept:
        return lengths
    return [lengths[round(i * (len(lengths) - 1) / (kept - 1))] for i in range(kept)]


def setup_tables(folder: RunFolder, live: StepLog | None, setup: str = "none") -> list[StepTable]:
    """One set-up's timed steps in this shard (spec=none's by default): its written streams, and ``live`` (the
    stream running) when it is that set-up's."""
    tables = [t for t in read_all_steps(folder.steps_dir) if t.setup == setup]
    if live is not None and live.setup == setup and len(live):
        tables.append(live.table)
    return tables


def per_occupancy(
    predicted: list[dict[str, Any]],
    by_label: dict[str, Candidate],
    costs: StepCosts | None,
    batch: int | None,
    requests_left: int,
    lengths: list[float],
    switch_seconds: float,
    stays: Callable[[SpecMethod | None, int | None], bool] | None = None,
    running: str | None = None,
) -> Occupancy | None:
    """The choice per batch occupancy from the plan's predictions and the costs fitted on the pilot's steps
    (``stays``, ``running``: schedule.choose's); None when it cannot be made (no costs: too few steps timed, or a
    backend that cannot tell its steps; a plan of an older version, without tokens per pass; an unknown batch), and
    the caller keeps the prediction's own rule."""
    if costs is None or not batch or any("predicted_tokens_per_pass" not in p for p in predicted):
        return None
    options = [
        Option(
            p["label"],
            by_label[p["label"]].method,
            int(by_label[p["label"]].spec.k or 0),
            p["predicted_tokens_per_pass"],
            p["predicted_draft_tokens_per_pass"],
        )
        for p in predicted
    ]
    log.info("spec=auto: plain step costs from %s; speculative from %s", costs.plain_source, costs.speculative_source)
    choice = choose(options, costs, batch, requests_left, lengths, switch_seconds, stays, running)
    if choice.method is None or choice.label == "none":
        return Occupancy(choice, costs, None)
    fixed = choice.fixed_k
    base = next(c for c in by_label.values() if c.method is choice.method and (fixed is None or c.spec.k == fixed))
    winner = base if fixed is not None else scheduled(base, [list(e) for e in choice.schedule])
    by_label.setdefault(winner.label, winner)
    return Occupancy(choice, costs, winner)


def adopt(decision: dict[str, Any], by_label: dict[str, Candidate]) -> None:
    """Make a decision's scheduled winner a set-up the shard can run (a resumed shard, or another shard's
    decision): its base method's candidate with the decision's k schedule."""
    schedule = decision.get("k_schedule")
    if not schedule or decision["winner"] in by_label:
        return
    method = decision["winner"].split("-", 1)[0]
    base = next((c for c in by_label.values() if c.method.value == method), None)
    if base is not None:
        winner = scheduled(base, schedule)
        by_label[winner.label] = winner


def switch_check(folder: RunFolder, live: Callable[[], StepLog | None], winner: str) -> Callable[[], bool]:
    """The ``until`` of the winner's stream: every CHECK_EVERY steps, compare its speculative steps with spec=none's;
    once they are measurably slower, write the shard's switch back and stop admitting (the rest runs with none)."""
    checking = SwitchCheck([t for t in read_all_steps(folder.steps_dir) if t.setup == "none"])

    def slower() -> bool:
        steps = live()
        if steps is None or len(steps) - checking.seen < CHECK_EVERY or not checking.plain:
            return False
        verdict = checking.update(steps.table)
        if verdict is None or not verdict.slower:
            return False
        record = {"winner": winner, "why": verdict.why, "figures": verdict.figures, "after_steps": len(steps)}
        create_switch(folder.auto_switch_path, record)
        log.warning("spec=auto: %s: the rest of shard %s runs with spec=none", verdict.why, folder.shard_tag)
        return True

    return slower
