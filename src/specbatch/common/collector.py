"""Python's cyclic garbage collector, paused while a job starts.

Starting a job creates millions of objects that live as long as the job does: the modules of torch, transformers,
vLLM and MLflow, the configs, the engine's Python side. The collector runs every few hundred allocations and walks
the young ones again and again while they are being made, a fifth of the start's CPU (measured, user CPU of
`jobs/generate.py` on an AMD EPYC, AVX-512, 2 cores: a 2-row job on the dummy backend 4.7 -> 3.8 s, with MLflow
tracking 7.9 -> 6.3 s; importing torch, transformers' tokenizers and vLLM 9.4 -> 7.5 s). jobs/generate.py pauses it
before the job starts; the job resumes it once its engine is up, so what generating leaves behind is collected as
usual. Nothing else turns it back on: a process that never paused it is left as it was. A spec=auto shard starts
its engines phase by phase (specbatch.auto.engines), each inside :func:`paused_for_engine_start`: the first one is
the job's start, paused since launch, and a switch's start makes as many long-lived objects as the first.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

_paused = False


def pause_for_start() -> None:
    """Stop automatic collection until :func:`resume_after_start` (a collector already off stays off after)."""
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def resume_after_start() -> None:
    """Turn automatic collection back on if :func:`pause_for_start` turned it off; otherwise nothing."""
    global _paused
    if _paused:
        _paused = False
        gc.enable()


@contextmanager
def paused_for_engine_start() -> Iterator[None]:
    """Collection off while an engine starts, on again after (a collector the caller turned off stays off)."""
    pause_for_start()
    try:
        yield
    finally:
        resume_after_start()
