"""The dummy backend (``engine.backend=dummy``): a deterministic engine without a model, for logic tests and
jobs/bench_memory.py. It stands in for vLLM (its rules, its serve command) and has no knobs of its own."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

ENGINE = "specbatch.backends.dummy.dummy:DummyEngine"


@dataclass
class Options:
    """No knobs: the dummy reads only the neutral engine config (its batch is engine.max_num_seqs)."""

    SECTIONS: ClassVar[dict[str, str]] = {}
