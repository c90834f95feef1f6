"""spec=auto: not a method of its own but a role. The job measures candidates on its first rows and runs the rest
with the winner (specbatch.auto); no engine ever sees it, each phase runs one of the other methods."""

from __future__ import annotations

from specbatch.methods.method import Method

METHOD = Method(
    name="auto",
    rank=1000,
    knobs=("auto",),
    k_schedule_refusal="spec=auto chooses each phase's set-up itself (spec.auto.candidates lists them)",
)
