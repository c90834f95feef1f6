"""One shard of a spec=auto run: the generation steps (specbatch.run.generate) with the shard cut into phases.

The shard's rows are cut so that every phase is whole chunks, the same on every launch (the cut depends on the
config alone, so a resumed shard finds its parts where it left them). The pilot's and the measurements' rows are
drawn across the shard, not its first rows (specbatch.auto.cutting: a sorted file's first rows are one kind):

- the pilot, generated with the likeliest winner (specbatch.auto.likeliest, fixed create-once in the shard's
  auto-pilot.json before it runs, so that a resumed shard pilots on the same set-up): ``repeats`` slices of
  ``slice_rows`` (the job's batch) when the shard measures, else one chunk of ``pilot_rows`` (for the prediction
  alone). When earlier runs of this kind leave nothing to measure beside the pilot
  (specbatch.auto.likeliest.nothing_to_measure, recorded as the pilot's ``streamed``), the slices are cut as for
  measuring but the shard takes the unmeasured way below: nothing is drained;
- one measurement per measured set-up (the plan's, specbatch.auto.deciding): ``repeats`` further slices each;
- the rest, the rows between them in chunks of ``chunk_size`` (after a pilot that is not measured, the first four
  batches' worth in chunks of at most a batch: see below), generated with the winner.

One engine is open at a time (specbatch.auto.engines): the pilot's, started so that every k of its method runs in
it with the k set in place; a measured set-up or a winner it can run keeps it, any other starts its own. When the
shard measures, each slice is streamed on its own (the engine drains between slices) so that its tok/s is a repeat
of its set-up. When it does not, the pilot is the first chunk of an ordinary stream of the whole shard with the
pilot's set-up: the decision is made as soon as the pilot's part is written, and only if another set-up wins does
the stream stop admitting chunks (those in flight finish with it) and the winner take the rest. So a pilot that wins
costs nothing, and a shard the engine takes in at once runs entirely with the pilot's set-up.

Once the pilot is in, the shard's plan is written create-once beside its records; once the measurements are in, the
decision (specbatch.auto.decision) is written create-once as the run's decision.json: the first shard to write it
decides for every shard, and a shard that finds it there runs all its remaining rows with its winner. Every row is
generated once, by one set-up, which its ``method`` and ``k`` columns name (and its part's figures, ``setup``); all
of them are kept. Under sampling every phase draws the seeds of the run's own set-up, ``auto``
(ShardGeneration._stream), so no row repeats a sample of the spec=none baseline it is compared with, or of a
candidate's own fixed run.

A pilot whose rows generated no tokens (all error rows, e.g. the data's first rows are placeholders) gives nothing
to measure or predict a speedup against: the plan measures nothing, the decision keeps spec=none and both say why.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from specbatch.auto.candidates import candidate_job, candidate_jobs, candidates
from specbatch.auto.costs import K0_OVERHEAD
from specbatch.auto.cutting import rest_chunks, source_seams, spread
from specbatch.auto.deciding import ShardDecisions
from specbatch.auto.decision import (
    measured_slots,
)
from specbatch.auto.engines import ShardEngines
from specbatch.auto.handover import adopt, switch_check
from specbatch.auto.likeliest import likeliest, matching_runs, nothing_to_measure
from specbatch.common.collector import resume_after_start
from specbatch.common.interrupts import raise_if_stopped
from specbatch.config import ConfigError, JobConfig
from specbatch.engine import backend_class
from specbatch.run.folder import RunFolder
from specbatch.run.generate import ShardGeneration
from specbatch.run.records.decision_file import create_pilot
from specbatch.run.shard_summary import summarize_shard
from specbatch.run.sharding import chunk_ranges
from specbatch.run.summary import Summary

log = logging.getLogger(__name__)


class AutoShardGeneration(ShardDecisions, ShardGeneration):
    """spec=auto's steps of one shard (module docstring); the executor runs them like any shard's."""

    def __init__(self, job: JobConfig) -> None:
        super().__init__(job)
        auto = job.spec.auto
        assert auto is not None, "spec=auto jobs only"
        self.auto = auto
        self.candidates = candidates(job)
        for candidate in self.candidates:
            if len(candidate.spellings) > 1:
                log.info(
                    "spec.auto.candidates: %s are one set-up, %s: it is measured and listed once",
                    ", ".join(candidate.spellings),
                    candidate.label,
                )
        self._by_label = {c.label: c for c in self.candidates}
        self._slots = measured_slots(self.candidates, auto.measure_top)
        # Chunk numbers of the pilot's slices and of each measurement slot's slices (filled by cut()).
        self._pilot: list[int] = []
        self._measure: list[list[int]] = []
        self._span = range(0)
        # Why this shard measures nothing (cut() decides it from the config and the shard's rows); None: it measures.
        self.unmeasurable: str | None = None
        # The one engine open, and the set-ups that run in it without a new start (specbatch.auto.engines).
        self.engines = ShardEngines(job, self.candidates, backend_class(job.engine.backend).batch(job))

    # --- checks and the cut, before anything loads ---

    def engine_jobs(self) -> list[JobConfig]:
        return candidate_jobs(self.job, self.candidates)

    def preflight(self, job: JobConfig) -> None:
        try:
            super().preflight(job)
        except ConfigError as exc:
            label = job.spec.label
            raise ConfigError(
                f"spec.auto.candidates: {label} cannot run here: {exc}. Fix its checkpoint in "
                f"spec.auto.checkpoints.{job.spec.method.value}, or drop {label} from spec.auto.candidates"
            ) from None

    def cut(self, span: range) -> list[Sequence[int]]:
        """The pilot's and the measurements' slices, then the rest in chunks (module docstring). Measuring happens
        only where it can answer the question and stay in the budget: each slice as many rows as the job's batch,
        and the pilot and measurements together at most spec.auto.budget of the shard's rows; otherwise the pilot is
        one slice of spec.auto.pilot_rows, for the prediction alone."""
        auto, job, self._span = self.auto, self.job, span
        rows = len(span)
        slice_rows = auto.slice_rows or backend_class(job.engine.backend).batch(job)
        choosing = (1 + self._slots) * auto.repeats * (slice_rows or 0)
        if not self._slots:
            self.unmeasurable = "nothing to measure (spec.auto.measure_top=0 and no candidate replay cannot predict)"
        elif not slice_rows:
            self.unmeasurable = "the job's batch is not known before its engine starts: set spec.auto.slice_rows"
        elif choosing > auto.budget * rows:
            self.unmeasurable = (
                f"measuring the pilot and {self._slots} set-up(s) at the job's batch takes {choosing} rows "
                f"({auto.repeats} slices of {slice_rows} each), {choosing / rows:.0%} of this shard's {rows}: more "
                f"than spec.auto.budget={auto.budget:g} (more rows per shard, or a smaller batch with "
                "engine.max_num_seqs, make it fit)"
            )
        batch = backend_class(job.engine.backend).batch(job)
        assert self._source is not None, "prepare() reads the data first"
        seams = source_seams(self._source)
        if self.unmeasurable is not None:
            pilot = min(auto.pilot_rows, rows)
            if not pilot:
                self._pilot = []
                return chunk_ranges(span, job.chunk_size)
            (rows_of_pilot,), gaps = spread(span, 1, pilot, seams=seams)
            self._pilot = [0]
            # The stream admits whole chunks: the rows it may admit before the pilot is done (it keeps the engine
            # full meanwhile, so about a wave) go in chunks of at most a batch, so that admission stops close to
            # the decision and the winner gets what is left.
            return [rows_of_pilot, *rest_chunks(gaps, job.chunk_size, 4 * batch if batch else 0, batch)]
        assert slice_rows is not None
        dealt, gaps = spread(span, (1 + self._slots) * auto.repeats, slice_rows, seams=seams)
        numbers = [list(range(phase * auto.repeats, (phase + 1) * auto.repeats)) for phase in range(1 + self._slots)]
        self._pilot, self._measure = numbers[0], numbers[1:]
        return [*dealt, *rest_chunks(gaps, job.chunk_size)]

    # --- the phases ---

    def start_engine(self, todo: list[int]) -> None:
        # Engines start phase by phase (generate); only the warning about remote code is said here, once. The
        # collector paused since launch stays off until the first of them is up (specbatch.common.collector).
        self.warn_remote_code()
        if not todo:
            resume_after_start()

    def _generate(self, folder: RunFolder, config: dict[str, Any], todo: list[int]) -> None:
        # ShardGeneration.generate calls it, with the shard's progress shown across the phases.
        left = sorted(todo)
        try:
            decision = folder.read_decision()
            if decision is None:
                pilot = self._pilot_label(folder)
                # Earlier runs left nothing to measure (auto-pilot.json says so, for a resumed shard too): the
                # pilot's slices head an ordinary stream, as when the shard cannot measure.
                self.unmeasurable = self.unmeasurable or (folder.read_auto_pilot() or {}).get("streamed")
                if self.unmeasurable is not None:
                    decision = self._lead_with(folder, config, left, pilot)
                else:
                    self._run_slices(folder, config, self._pilot, pilot, left)
                    # Each phase begins only if no stop came meanwhile (the slices' streams end as usual when one
                    # comes after their rows were admitted).
                    raise_if_stopped("spec=auto's plan", "the pilot's slices written are kept")
                    plan = self._plan(folder)
                    for slot, label in zip(self._measure, plan["measure"], strict=False):
                        self._run_slices(folder, config, slot, label, left)
                    raise_if_stopped(
                        "spec=auto's decision", "the pilot's and the measurements' slices written are kept"
                    )
                    decision = self._decide(folder, plan)
            adopt(decision, self._by_label)
            revised = folder.read_auto_revised()
            if revised is not None:
                adopt(revised, self._by_label)
            winner = (revised or decision)["winner"]
            winner = "none" if folder.read_auto_switch() else winner
            rest = [n for n in left if not folder.part_path(n).exists()]
            if rest:
                log.info("spec=auto: %d chunk(s) left, generated with %s (%s)", len(rest), winner, decision["why"])
                self._stream_with(folder, config, rest, winner, self._rest_until(folder, decision, winner))
                rest = [n for n in rest if not folder.part_path(n).exists()]
                revised = folder.read_auto_revised()
                if rest and revised is not None and revised["winner"] != winner and not folder.read_auto_switch():
                    adopt(revised, self._by_label)
                    winner = revised["winner"]
                    self._stream_with(folder, config, rest, winner, self._rest_until(folder, decision, winner))
                    rest = [n for n in rest if not folder.part_path(n).exists()]
                if rest and folder.read_auto_switch():
                    self._turn_off(winner, folder, rest)
                    self._stream_with(folder, config, rest, "none")
            elif winner != "none" and self.unmeasurable is not None and winner == self._pilot_of(folder):
                log.info("spec=auto: %s piloted and won: its stream generated every row of this shard", winner)
            elif winner != "none":
                log.info(
                    "spec=auto: %s won, but no row of this shard was left for it: the shard's %d rows were all "
                    "admitted (the engine takes up to %d requests at once) or measured before the decision; "
                    "choosing pays on shards of many batches",
                    winner,
                    len(self._span),
                    2 * (self._concurrency() or 1),
                )
        except BaseException as error:
            try:
                self.engines.close()
            except Exception as exc:  # noqa: BLE001 - ``error`` is what the caller must see
                log.warning("closing spec=auto's engines failed too (%s: %s)", type(exc).__name__, exc)
            raise error from None
        self.engines.close()

    def _rest_until(self, folder: RunFolder, decision: dict[str, Any], winner: str) -> Callable[[], bool] | None:
        """What stops the rest's stream admitting chunks: the check against spec=none's steps (the switch back), and
        for an unmeasured choice not revised yet, its one revision (ShardDecisions._revision). A revision switches
        only within the running engine and never starts one, so where no other candidate shares the winner's
        engine (spec=none's, suffix decoding's, any at the full batch) it could change nothing: its replay of a
        quarter of the shard's rows, which the stream waits for, is not made."""
        live = lambda: self.streamer.steps if self.streamer else None  # noqa: E731 - the stream running now
        stops = [switch_check(folder, live, winner)] if winner != "none" else []
        plan = folder.read_auto_plan()
        running = self._candidate(winner)
        shared = any(self.engines.shares_engine(running, c) for c in self._by_label.values() if c.label != winner)
        if shared and not decision["measured"] and plan is not None and folder.read_auto_revised() is None:
            stops.append(self._revision(folder, plan, winner))
        if not stops:
            return None
        return lambda: any(stop() for stop in stops)

    def _pilot_label(self, folder: RunFolder) -> str:
        """The set-up this shard pilots on, fixed create-once before its pilot runs (specbatch.auto.likeliest): a
        resumed shard pilots on the same one whatever earlier runs appeared meanwhile. A shard an older version
        began (no record) keeps what its written pilot slices, or its plan, say: spec=none."""
        recorded = folder.read_auto_pilot()
        if recorded is None:
            written = [n for n in self._pilot if folder.part_stats_path(n).exists()]
            if written or folder.read_auto_plan() is not None:
                label = folder.read_part_stats(written[0]).get("setup", "none") if written else "none"
                chosen = {"label": label, "source": "the pilot slices an earlier version of spec=auto wrote"}
            else:
                runs = matching_runs(self.job)  # read once for both questions
                chosen = likeliest(self.job, self.candidates, runs).to_dict()
                if self.unmeasurable is None:
                    chosen["streamed"] = nothing_to_measure(self.job, self.candidates, chosen["label"], runs)
            create_pilot(folder.auto_pilot_path, chosen)
            recorded = folder.read_auto_pilot() or chosen
        self._candidate(recorded["label"])  # one of this run's candidates, or a clear error
        log.info("spec=auto: the pilot runs %s (%s)", recorded["label"], recorded["source"])
        return str(recorded["label"])

    def _lead_with(self, folder: RunFolder, config: dict[str, Any], left: list[int], pilot: str) -> dict[str, Any]:
        """The unmeasured way: the pilot heads an ordinary stream of every chunk left with the pilot's set-up, so it
        runs at the job's batch and a pilot that wins costs nothing (its chunks are the shard's first: the cut numbers
        them so, and a stream admits in order). Once the pilot's parts are written its plan and decision are made
        (replay and the pilot's timed steps, no other engine); when another set-up wins no further chunk is
        admitted, the ones in flight finish with the pilot's and the rest is left to the winner (in the same engine
        when its k can be set there)."""
        piloted = lambda: all(folder.part_path(n).exists() for n in self._pilot)  # noqa: E731
        if piloted():
            return self._decide(folder, self._plan(folder))
        decided: dict[str, Any] = {}
        goes_on: list[Callable[[], bool] | None] = []

        def hand_over() -> bool | None:
            if not decided and not piloted():
                return None  # the stream keeps the engine full and queues nothing ahead until the decision
            if not decided:
                decided.update(self._decide(folder, self._plan(folder)))
                if decided["winner"] != pilot:
                    log.info(
                        "spec=auto: the pilot is in and %s wins: %s admits no further chunk; the ones in flight "
                        "finish with it",
                        decided["winner"],
                        pilot,
                    )
                else:
                    # The pilot's set-up won: its stream goes on, watched as the rest's is.
                    goes_on.append(self._rest_until(folder, decided, pilot))
            if decided["winner"] != pilot:
                return True  # every call from now on: no further chunk is admitted
            until = goes_on[0] if goes_on else None
            return until is not None and until()

        self._stream_with(folder, config, [n for n in left if not folder.part_path(n).exists()], pilot, hand_over)
        return decided or self._decide(folder, self._plan(folder))

    def _run_slices(
        self, folder: RunFolder, config: dict[str, Any], slices: list[int], label: str, left: list[int]
    ) -> None:
        """Each slice of a phase not written yet, streamed on its own with ``label``'s set-up."""
        for number in slices:
            if number in left and not folder.part_path(number).exists():
                self._stream_with(folder, config, [number], label)

    def _stream_with(
        self,
        folder: RunFolder,
        config: dict[str, Any],
        chunks: list[int],
        label: str,
        until: Callable[[], bool | None] | None = None,
    ) -> None:
        candidate = self._candidate(label)
        self.engine = self.engines.open_for(candidate)
        self._stream(self.engine, folder, config, chunks, candidate_job(self.job, candidate), until)

    def _turn_off(self, winner: str, folder: RunFolder, rest: list[int]) -> None:
        """After the switch back: speculation off at every batch size in the winner's running engine, which then
        serves as spec=none's, when it can change k without a new start and running the ``rest`` chunks
        k0_overhead slower there (the plan's, reckoned at the pilot's seconds per row) costs less than a start-up;
        else spec=none's stream starts an engine of its own."""
        plan = folder.read_auto_plan() or {}
        startup = self._startup_seconds(plan)
        overhead = (plan.get("costs") or {}).get("k0_overhead", K0_OVERHEAD)
        rest_seconds = None
        if plan.get("pilot_rows") and plan.get("pilot_seconds"):
            rest_seconds = sum(len(self._chunks[n]) for n in rest) * plan["pilot_seconds"] / plan["pilot_rows"]
        pays = rest_seconds is not None and rest_seconds * overhead <= startup
        if pays and self.engines.label == winner and self.engines.speculation_off():
            log.info("spec=auto: speculation turned off in %s's running engine, which goes on as spec=none's", winner)
        elif not pays:
            log.info(
                "spec=auto: spec=none gets an engine of its own: the rest (about %s s) would run %.0f%% slower in "
                "%s's engine at k 0, more than a start-up (%.1f s)",
                "?" if rest_seconds is None else f"{rest_seconds:.0f}",
                100 * overhead,
                winner,
                startup,
            )

    def summarize(self, folder: RunFolder, parts: list[Path]) -> Summary:
        startup = sum(s for _, s, _ in self.engines.startups)
        warmup = sum(w for _, _, w in self.engines.startups)
        return summarize_shard(folder, self.job, parts, startup, warmup, roles=self.setup_roles(folder))
