"""spec=auto's plan and decision of one shard, as records (specbatch.run.records.decision_file): the plan made once
from the pilot's rows (the replay's prediction, which set-up measures which slot, or why nothing is measured), and the
decision made once its inputs are in (measured slices by compare's noise rule, else the choice per batch occupancy
from the steps timed here, else the prediction's own rule), written create-once as the run's: the first shard's wins.
A mixin of specbatch.auto.generation.AutoShardGeneration, whose phases and streams provide what it reads.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from specbatch.auto.candidates import Candidate
from specbatch.auto.costs import StepCosts, fit_setup, prompt_share
from specbatch.auto.decision import (
    UNMEASURED_MARGIN,
    Predicted,
    around_pilot,
    candidate_rows,
    decide,
    earlier_bound,
    measuring_gain,
    measuring_pays,
    predict,
    slower_before,
    switchable,
    unmeasured_winner,
    whole_job,
)
from specbatch.auto.engines import ShardEngines
from specbatch.auto.handover import Occupancy, lengths_of, per_occupancy, setup_tables
from specbatch.auto.likeliest import earlier_verdicts
from specbatch.auto.slices import no_tokens, silent_pilot, slice_rates
from specbatch.config import ConfigError, JobConfig
from specbatch.config.spec import AutoConfig
from specbatch.engine import Engine, backend_class
from specbatch.methods import SpecMethod
from specbatch.prediction.turns import RunTurns, read_parts
from specbatch.run.folder import RunFolder
from specbatch.run.records.decision_file import create_decision, create_plan, create_revised
from specbatch.run.records.steps_file import StepTable
from specbatch.run.streaming import ChunkStreamer

log = logging.getLogger(__name__)

# An unmeasured choice is revised once, from every row written, when this share of the shard's rows is (a quarter:
# four times the rows of a pilot of 1/16 of the shard, with most of the rest still to gain from it).
REVISE_AT = 0.25
# A measured slice drains the engine (its rows all start together and finish as their lengths say), so about this
# share of its time runs below the full batch: what measuring costs beyond the rows it generates. Seen on
# jobs/bench.py --auto's help-desk cell at batch 16 (1,000 rows, 64 new tokens, 2 cores of an AMD EPYC with AVX-512
# BF16): 12 slices of 16 rows cost about 15 s beyond the fixed run's 213 s, about half their own time.
DRAIN_SHARE = 0.5
# With the pass costs measured in the pilot's engine, what the prediction may be off by: the replay's acceptance
# (within 2.3 % of the whole run's on chat) and the step fit's error; the prior's costs keep UNMEASURED_MARGIN.
MEASURED_MARGIN = 1.05
# Engine steps between two counts of the parts written, while the revision waits for its share of the rows.
REVISE_LOOK_EVERY = 16


class ShardDecisions:
    """The plan and the decision of an AutoShardGeneration (module docstring)."""

    # Provided by AutoShardGeneration and the ShardGeneration it extends.
    engines: ShardEngines
    job: JobConfig
    auto: AutoConfig
    engine: Engine | None
    streamer: ChunkStreamer | None
    candidates: list[Candidate]
    unmeasurable: str | None
    _by_label: dict[str, Candidate]
    _chunks: list[Sequence[int]]
    _pilot: list[int]
    _measure: list[list[int]]
    _span: range

    def _candidate(self, label: str) -> Candidate:
        candidate = self._by_label.get(label)
        if candidate is None:
            raise ConfigError(
                f"spec=auto: this run's decision names {label}, which is not among spec.auto.candidates "
                f"({', '.join(self._by_label)}): the run was started with other candidates; finish it with those"
            )
        return candidate

    def _concurrency(self) -> int | None:
        """Requests the pilot's engine ran at once (its own figure, or the backend's for a resumed shard)."""
        if self.engine is not None and self.engine.concurrency:
            return self.engine.concurrency
        return backend_class(self.job.engine.backend).batch(self.job)

    def _pilot_of(self, folder: RunFolder) -> str:
        """The set-up the pilot ran (its record; spec=none for a shard an older version began)."""
        recorded = folder.read_auto_pilot()
        return str(recorded["label"]) if recorded is not None else "none"

    def _pilot_rates(self, folder: RunFolder, pilot: str) -> list[tuple[int, float]]:
        """(tokens, seconds) of the pilot: each slice's when the shard measures; else the chunks of the stream it
        headed, as one (their figures count from the stream's start, so they overlap)."""
        rates = slice_rates(folder, self._pilot, pilot)
        if self.unmeasurable is None or not rates:
            return rates
        return [(sum(t for t, _ in rates), max(s for _, s in rates))]

    def _startup_seconds(self, plan: dict[str, Any]) -> float:
        """What an engine start-up costs here: the first one timed in this launch, else the plan's."""
        if self.engines.startups:
            return self.engines.startups[0][1]
        return float(plan.get("engine_startup_seconds") or 0.0)

    def _costs(self, folder: RunFolder, pilot: str) -> StepCosts | None:
        """The step costs from the pilot's timed steps (its written streams, and the one running)."""
        return fit_setup(self._tables(folder, pilot), pilot)

    def _tables(self, folder: RunFolder, setup: str) -> list[StepTable]:
        """``setup``'s timed steps in this shard: its written streams, and the one running."""
        return setup_tables(folder, self.streamer.steps if self.streamer else None, setup)

    def _predict_on(
        self, folder: RunFolder, numbers: list[int], setup: str, left_out: Sequence[str] = ()
    ) -> tuple[RunTurns, list[Predicted], StepCosts | None]:
        """The replay of the written parts ``numbers``, each candidate's passes (but ``left_out``'s) priced with the
        costs of ``setup``'s timed steps at the job's batch (the prior's line without them); the turns, the
        prediction and the costs."""
        run = RunTurns(folder.root, {})
        read_parts([folder.part_path(n) for n in numbers], run)
        batch = self._concurrency()
        tables = self._tables(folder, setup)
        costs = fit_setup(tables, setup)
        pass_cost = None
        if costs is not None and batch:
            pass_cost = lambda d: costs.speculative_pass(batch, d) / costs.plain(batch)  # noqa: E731
        replayed = [c for c in self.candidates if c.label not in left_out]
        predicted = predict(run.turns, replayed, self.job.model.max_model_len, batch, pass_cost)
        # The speedups as the whole job's: the prompts' share of the time, from the same steps at the pace of the
        # set-up that ran them (not reckoned for one the replay does not predict, e.g. a scheduled winner).
        pace = 1.0 if setup == "none" else next((p.speedup for p in predicted if p.label == setup), None)
        if costs is not None and pace is not None:
            share = prompt_share(costs, tables, pace)
            if share is not None:
                costs, predicted = replace(costs, prompt_share=share), whole_job(predicted, share)
        return run, predicted, costs

    def _plan(self, folder: RunFolder) -> dict[str, Any]:
        """The shard's plan, made from its pilot once (create-once: a resumed shard reads the one it wrote)."""
        plan = folder.read_auto_plan()
        if plan is not None:
            return plan
        pilot = self._pilot_of(folder)
        run, predicted, costs = self._predict_on(folder, self._pilot, pilot)
        pilot_rows = sum(len(self._chunks[n]) for n in self._pilot)
        pilot_seconds = sum(seconds for _, seconds in self._pilot_rates(folder, pilot))
        startup = self._startup_seconds({})
        lead = self._candidate(pilot)
        shares = lambda label: self.engines.shares_engine(lead, self._candidate(label))  # noqa: E731
        # What measuring a set-up could gain and what it costs (decision.measuring_gain): the rest at the pilot's
        # pace; its slices, which drain the engine, each about DRAIN_SHARE of a pilot slice's time below the full
        # batch; and for another engine two start-ups (its own, and one more if it loses).
        rest_seconds = pilot_seconds / pilot_rows * (len(self._span) - pilot_rows) if pilot_rows else 0.0
        slices = DRAIN_SHARE * pilot_seconds / max(len(self._pilot), 1) * self.auto.repeats
        best_here = max([p.speedup for p in predicted if shares(p.label) or p.label == pilot] or [1.0])
        if lead.method is SpecMethod.none:
            best_here = max(best_here, 1.0)
        margin = MEASURED_MARGIN if costs is not None and costs.speculative_measured else UNMEASURED_MARGIN
        rates, ruled = earlier_verdicts(self.job, self.candidates, pilot)
        pace = 1.0 if lead.method is SpecMethod.none else next((p.speedup for p in predicted if p.label == pilot), 1.0)

        def pays_off(label: str, speedup: float) -> str | None:
            if self.auto.always_measure:
                return None
            cost = slices + (0.0 if shares(label) else 2 * startup)
            bounded, said = earlier_bound(label, speedup, pilot, pace, rates)
            # Bounded by whole runs of this kind: no error in its favour. Those are finer than the few slices that
            # would measure it, which could not tell a set-up they rank so close from the pilot's anyway.
            why_not = measuring_gain(rest_seconds, best_here, bounded, 1.0 if said else margin, cost)
            return why_not + said if why_not is not None else None

        measure, notes = around_pilot(
            lead,
            self.candidates,
            predicted,
            self.auto.measure_top,
            len(self._measure),
            shares,
            ruled,
            pays_off,
        )
        silent = silent_pilot(folder, self._pilot)
        if silent is not None:
            # Measuring against a pilot that timed nothing could not answer: its slots go to the winner (none).
            measure, why = [], f"{silent}: nothing to predict or measure a speedup against"
        elif self.unmeasurable is not None:
            measure, why = [], self.unmeasurable
        else:
            starting = [label for label in measure if not shares(label)]
            pays, why = measuring_pays(
                len(starting), startup, pilot_seconds, pilot_rows, len(self._span), self.auto.budget
            )
            if not pays:
                notes += [
                    f"{label} is not measured: its engine start-up does not fit the budget" for label in starting
                ]
                measure = [label for label in measure if shares(label)]
        requests = len(run.turns)
        plan = {
            "shard": folder.shard_tag,
            "pilot": pilot,
            # What the rest's cost is reckoned from (specbatch.auto.schedule): each pilot row's requests (turns
            # and samples) and how long their completions were.
            "requests_per_row": requests / pilot_rows if pilot_rows else 1.0,
            "completion_lengths": lengths_of(run.turns),
            "predicted": [p.to_dict() for p in predicted],
            # Set-ups earlier fixed runs of this kind made no faster than the pilot's: not switched to unmeasured.
            "slower_before": slower_before(rates),
            # The step costs the prediction priced passes with (None: the prior's line, decision.PRIOR_PASS_COST).
            "costs": costs.to_dict() if costs is not None else None,
            "measure": measure,
            "measuring": bool(measure),
            "not_measured": notes,
            "why": why,
            "pilot_rows": pilot_rows,
            "pilot_seconds": pilot_seconds,
            "engine_startup_seconds": startup,
        }
        log.info("spec=auto: %s; measured after the pilot: %s", why, ", ".join(measure) or "nothing")
        create_plan(folder.auto_plan_path, plan)
        return folder.read_auto_plan() or plan

    def _decide(self, folder: RunFolder, plan: dict[str, Any]) -> dict[str, Any]:
        """This shard's decision, written as the run's unless another shard's is there first; the run's one."""
        pilot = plan.get("pilot", "none")
        rates = {pilot: [t / s for t, s in self._pilot_rates(folder, pilot)]}
        for slot, label in zip(self._measure, plan["measure"], strict=False):
            rates[label] = [t / s for t, s in slice_rates(folder, slot, label)]
        measured = plan["measuring"] and rates[pilot] and all(rates.get(m) for m in plan["measure"])
        figures: dict[str, dict[str, Any]] = {}
        occupancy = None
        silent = silent_pilot(folder, self._pilot)
        if silent is not None:
            # Also for a plan made before pilots of no tokens were caught (it measured): none, never a division by 0.
            measured = False
            winner, why = "none", f"{silent}: no speedup can be measured or predicted against it, so spec=none is kept"
        elif measured:
            leader = self._candidate(pilot)
            free = [label for label in rates if self.engines.shares_engine(self._candidate(label), leader)]
            winner, why, figures = decide(rates, pilot, free)
        else:
            winner, why, occupancy = self._unmeasured(folder, plan)
            why = f"{plan['why']}; {why}"
        slots = {pilot: self._pilot, **dict(zip(plan["measure"], self._measure, strict=False))}
        silent_slices = {c.label: no_tokens(folder, slots.get(c.label, [])) for c in self.candidates}
        rows = candidate_rows(self.candidates, plan["predicted"], rates, figures, silent_slices)
        decision = {
            "winner": winner,
            "winner_caption": occupancy.caption if occupancy is not None else self._candidate(winner).caption,
            # What runs the winner elsewhere, e.g. python jobs/serve.py --print <overrides>.
            "overrides": self._candidate(winner).overrides,
            "why": why,
            "measured": bool(measured),
            "decided_by": folder.shard_tag,
            "pilot": pilot,
            "candidates": rows,
            # The costs the choice used, each measured here or assumed (a prior: its source says so).
            "costs": plan.get("costs"),
            "engine_startup_seconds": plan.get("engine_startup_seconds"),
            "not_measured": plan.get("not_measured") or [],
            **(occupancy.record() if occupancy is not None else {}),
        }
        if create_decision(folder.decision_path, decision):
            log.info("spec=auto decided: %s (%s); written to %s", winner, why, folder.decision_path)
        else:
            theirs = folder.read_decision() or decision
            log.info(
                "spec=auto: another shard decided first (%s, by %s); this shard's own figures say %s. The run's "
                "decision is kept: %s",
                theirs["winner"],
                theirs["decided_by"],
                winner,
                folder.decision_path,
            )
            decision = theirs
        return decision

    def _unmeasured(self, folder: RunFolder, plan: dict[str, Any]) -> tuple[str, str, Occupancy | None]:
        """(winner, why, the choice per batch occupancy when it could be made) from a plan's prediction alone."""
        occupancy = self._per_occupancy(folder, plan)
        if occupancy is not None:
            return occupancy.label, occupancy.choice.why, occupancy
        winner, why = unmeasured_winner([(p["label"], p["predicted_speedup"]) for p in switchable(plan)])
        return winner, why, None

    def _revision(self, folder: RunFolder, plan: dict[str, Any], running: str) -> Callable[[], bool]:
        """The prediction revised once, when REVISE_AT of the shard's rows are written (the ``until`` of the
        stream running ``running``, an unmeasured choice): replayed on every row written, priced with the costs of
        every step ``running``'s engine timed, and chosen again as the decision was. Only a set-up that engine runs
        in place may take over (a revision never costs a start-up): then the choice is written create-once as the
        shard's auto-revised.json, the stream admits no further chunk and the rest runs with it."""
        done: list[bool] = []
        asked = [0]

        def revise() -> bool:
            # Asked at every engine step: the parts written (a stat per chunk) are counted every REVISE_LOOK_EVERY.
            asked[0] += 1
            if done or asked[0] % REVISE_LOOK_EVERY:
                return False
            written = [n for n in range(len(self._chunks)) if folder.part_path(n).exists()]
            rows = sum(len(self._chunks[n]) for n in written)
            if rows < REVISE_AT * len(self._span):
                return False
            done.append(True)
            # The stream waits for the replay: only what the revision may switch to is replayed.
            began = time.perf_counter()
            run, predicted, _ = self._predict_on(folder, written, running, plan.get("slower_before") or [])
            again = {
                **plan,
                "pilot": running,
                "predicted": [p.to_dict() for p in predicted],
                "completion_lengths": lengths_of(run.turns),
                "requests_per_row": len(run.turns) / rows if rows else 1.0,
            }
            winner, why, occupancy = self._unmeasured(folder, again)
            rows_said = f"{rows} rows (in {time.perf_counter() - began:.1f} s)"
            if winner == running:
                log.info("spec=auto: revised on %s, %s still wins (%s)", rows_said, running, why)
                return False
            candidate = self._by_label.get(winner)
            if candidate is None or not self.engines.runs_in_place(candidate):
                log.info(
                    "spec=auto: revised on %s, %s would win, but not in %s's engine: %s is kept (a revision "
                    "never costs a start-up)",
                    rows_said,
                    winner,
                    running,
                    running,
                )
                return False
            record = {
                "winner": winner,
                "replaces": running,
                "why": f"revised on {rows} rows: {why}",
                "rows": rows,
                "predicted": again["predicted"],
                **(occupancy.record() if occupancy is not None else {}),
            }
            create_revised(folder.auto_revised_path, record)
            log.info(
                "spec=auto: revised on %s: %s takes the rest from %s in its engine (%s)",
                rows_said,
                winner,
                running,
                why,
            )
            return True

        return revise

    def _per_occupancy(self, folder: RunFolder, plan: dict[str, Any]) -> Occupancy | None:
        """The choice per batch occupancy (specbatch.auto.handover) from the pilot's timed steps, for the rows the
        winner would get: those not written and not in the engine. What runs in the pilot's engine costs no switch."""
        waiting = sum(len(rows) for n, rows in enumerate(self._chunks) if not folder.part_path(n).exists())
        requests = int(waiting * plan.get("requests_per_row", 1.0)) - (self.engine.unfinished if self.engine else 0)
        pilot = self._candidate(plan.get("pilot", "none"))

        def stays(method: SpecMethod | None, k: int | None) -> bool:
            if method is None or pilot.method is SpecMethod.none:
                return method is None and pilot.method is SpecMethod.none
            return method is pilot.method and (self.engines.roomy(method) or k == pilot.spec.k)

        costs, share = self._costs(folder, pilot.label), (plan.get("costs") or {}).get("prompt_share")
        return per_occupancy(
            switchable(plan),
            self._by_label,
            replace(costs, prompt_share=share) if costs is not None else None,  # the plan's speedups weighed it
            self._concurrency(),
            max(requests, 0),
            plan.get("completion_lengths") or [],
            self._startup_seconds(plan),
            stays,
            pilot.label,  # the set-up running (the revision's plan names it as its pilot)
        )

    def setup_roles(self, folder: RunFolder) -> dict[str, list[str]]:
        """Each set-up's part in this shard, as its summary names it (Summary.per_setup): none pilots, the plan's
        set-ups are measured, the run's decision names the winner, and none is switched back to when the check sent
        the rest back to it (auto-switch.json)."""
        plan, decision = folder.read_auto_plan() or {}, folder.read_decision()
        roles: dict[str, list[str]] = {self._pilot_of(folder): ["pilot"]}
        for label in plan.get("measure") or []:
            roles.setdefault(label, []).append("measured")
        if decision is not None:
            roles.setdefault(decision["winner"], []).append("winner")
        if folder.read_auto_switch():
            roles.setdefault("none", []).append("switched back to")
        return roles
