"""The dummy backend (``engine.backend=dummy``): a deterministic engine without a model, for logic tests and
jobs/bench_memory.py. It stands in for vLLM (its rules, its serve command); its one knob makes it take time."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from specbatch.config.declarations import absent_when_null

ENGINE = "specbatch.backends.dummy.dummy:DummyEngine"


@dataclass
class Options:
    """The dummy's knob (its batch is the neutral engine.max_num_seqs)."""

    SECTIONS: ClassVar[dict[str, str]] = {}

    # engine.step_seconds: each engine step sleeps this long, so that a job lasts (watching one run, killing a
    # replica mid-run) without a model; null: no time at all. Left out of the digests while null.
    step_seconds: float | None = field(default=None, metadata=absent_when_null())
