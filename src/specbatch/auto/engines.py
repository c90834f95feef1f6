"""The one engine a spec=auto shard has open, and which set-ups run in it without a new start.

vLLM looks each step's k up by batch size (spec.k_schedule), and an in-process engine started with a schedule can
have it rewritten between streams (Engine.set_k_schedule; capped at the k it was started with). So the engine of a
method that follows a schedule is started roomy: at the largest k of that method among the candidates, with a
schedule at the set-up's own k at every batch size of the job (the largest k one batch size past them, where vLLM's
lookup never goes). Every candidate of that method (a k, a schedule of spec=auto's
choice per batch occupancy, or k = 0 everywhere after a switch back) then runs in it: the pilot's k rotated in place
for the measured slices, and the winner keeping the pilot's engine. A method that cannot follow a schedule (suffix
decoding) runs one k per engine.

One engine at a time: closing one of vLLM's in-process engines tears down the process's parallel groups, which an
engine left open beside it then lacks ("pipeline model parallel group is not initialized").
"""

from __future__ import annotations

import dataclasses
import logging
import time

from specbatch.auto.candidates import Candidate
from specbatch.common.collector import paused_for_engine_start
from specbatch.config import JobConfig
from specbatch.config.spec import SpecConfig
from specbatch.engine import Engine, start_engine
from specbatch.methods import METHODS, SpecMethod

log = logging.getLogger(__name__)


class ShardEngines:
    """A shard's open engine (module docstring), and (label, start-up s, warm-up s) of every one it started."""

    def __init__(self, job: JobConfig, candidates: list[Candidate], batch: int | None) -> None:
        self.job, self.batch = job, batch
        # The largest k of each method that follows a schedule: what its engine is started at.
        self._room: dict[SpecMethod, int] = {}
        for candidate in candidates:
            method, k = candidate.method, candidate.spec.k
            if batch and k and METHODS[method].k_schedule_refusal is None:
                self._room[method] = max(self._room.get(method, 0), k)
        self.engine: Engine | None = None
        # The spec the open engine was started with, and the set-up it runs now.
        self._spec: SpecConfig | None = None
        self.label: str | None = None
        self.startups: list[tuple[str, float, float]] = []

    def roomy(self, method: SpecMethod) -> bool:
        """Whether ``method``'s engine is started roomy: every k of the method's candidates runs in it."""
        return method in self._room

    def shares_engine(self, one: Candidate, other: Candidate) -> bool:
        """Whether ``one`` and ``other`` run in one engine (the same set-up, or ks of one roomy method)."""
        return one.label == other.label or (one.method is other.method and self.roomy(one.method))

    def runs_in_place(self, candidate: Candidate) -> bool:
        """Whether the open engine runs ``candidate`` without a new start (its own set-up, or one its k fits)."""
        if self.engine is None or self._spec is None:
            return False
        if candidate.label == self.label:
            return True
        spec, started = candidate.spec, self._spec
        if candidate.method is SpecMethod.none:
            return False  # k = 0 in a speculative engine is not spec=none (costs.K0_OVERHEAD): speculation_off()
        return (
            started.k_schedule is not None
            and spec.method is started.method
            and spec.k is not None
            and spec.k <= (started.k or 0)
        )

    def open_for(self, candidate: Candidate) -> Engine:
        """The engine that runs ``candidate``: the open one set to it in place when it can be, else a new one."""
        if self.runs_in_place(candidate) and self._set(candidate):
            assert self.engine is not None
            return self.engine
        self.close()
        spec = self._started_spec(candidate)
        began = time.perf_counter()
        with paused_for_engine_start():
            engine = start_engine(dataclasses.replace(self.job, spec=spec))
        startup = engine.startup_seconds or time.perf_counter() - began
        self.startups.append((candidate.label, startup, engine.warmup_seconds))
        room = f" (started at k {spec.k} with a schedule, so its k can change in place)" if spec.k_schedule else ""
        log.info("spec=auto: engine for %s started in %.1f s%s", candidate.label, startup, room)
        self.engine, self._spec, self.label = engine, spec, candidate.label
        return engine

    def speculation_off(self) -> bool:
        """Speculation off at every batch size in the open engine, which then serves as spec=none's; False when it
        cannot be done in place."""
        if self.engine is None or not self.batch or not self.engine.set_k_schedule([[1, self.batch, 0]]):
            return False
        self.label = "none"
        return True

    def close(self) -> None:
        engine, self.engine, self._spec, self.label = self.engine, None, None, None
        if engine is not None:
            engine.close()

    def _set(self, candidate: Candidate) -> bool:
        if candidate.label == self.label:
            return True
        assert self.engine is not None and self.batch
        spec = candidate.spec
        schedule = spec.k_schedule or [[1, self.batch, int(spec.k or 0)]]
        if not self.engine.set_k_schedule([list(entry) for entry in schedule]):
            return False
        log.info("spec=auto: %s's engine set to %s in place (no new start)", self.label, candidate.label)
        self.label = candidate.label
        return True

    def _started_spec(self, candidate: Candidate) -> SpecConfig:
        """``candidate``'s spec, roomy when its method follows a schedule (module docstring)."""
        spec, room = candidate.spec, self._room.get(candidate.method)
        if room is None or not spec.k or not self.batch:
            return spec
        schedule = [list(entry) for entry in spec.k_schedule or [[1, self.batch, spec.k]]]
        if room > max(k for _, _, k in schedule):
            # The k is the schedule's largest (SpecConfig derives it so): the room goes one batch size past the
            # last, which vLLM's lookup, as long as the engine's batch, never reaches.
            end = schedule[-1][1] + 1
            schedule.append([end, end, room])
        return dataclasses.replace(spec, num_speculative_tokens=None, k_schedule=schedule)
