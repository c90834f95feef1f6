"""Row-level fault isolation in the turn loop, with a fake engine (logic only)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from specbatch.conversation import generate_rows
from specbatch.data import SourceRow
from specbatch.engine import Generation
from specbatch.prompts import load_tokenizer
from specbatch.spec_metrics import Counters


class FakeEngine:
    """Answers every prompt with 'ANSWER<n>'; a batch holding a poisoned prompt fails as a whole, as vLLM does."""

    def __init__(self, poison: str | None = None, broken: bool = False) -> None:
        self.poison, self.broken, self.calls = poison, broken, []

    def generate(self, prompts, params):
        self.calls.append([p.row_id for p in prompts])
        if self.broken or any(self.poison and self.poison in p.text for p in prompts):
            raise ValueError("engine refused the batch")
        outputs = []
        for _ in prompts:
            completion = SimpleNamespace(
                text=f"ANSWER{len(self.calls)}", token_ids=[7, 8], finish_reason="stop", spec_decode_metrics=None
            )
            outputs.append(SimpleNamespace(outputs=[completion]))
        return Generation(outputs=outputs, counters=Counters(generation_tokens=2 * len(prompts)), seconds=0.5)


@pytest.fixture
def setup(job_factory):
    job = job_factory("spec=none", "dataset=local", "dataset.path=x.jsonl", "dataset.prompt_format=turns")
    return job, load_tokenizer(job.model)


def rows() -> list[SourceRow]:
    return [
        SourceRow("r1", "a", turns=["hello", "again"]),
        SourceRow("r2", "b", turns=["POISON here", "never asked"]),
        SourceRow("r3", "a", turns=["fine"]),
        SourceRow("r5", "b", turns=["x " * 3000, "second", "third"]),
        SourceRow("r4", None, error="line 9 is not a JSON object"),
    ]


def test_a_failing_row_is_isolated_and_its_later_turns_are_errors(setup) -> None:
    job, tokenizer = setup
    engine = FakeEngine(poison="POISON")
    result = generate_rows(engine, rows(), job, tokenizer)
    got = {(r["row_id"], r["turn"]): (r["status"], r["error"]) for r in result.records}
    assert got[("r1", 1)] == ("ok", None) and got[("r1", 2)] == ("ok", None) and got[("r3", 1)] == ("ok", None)
    assert got[("r2", 1)][0] == "error" and "engine refused the batch" in got[("r2", 1)][1]
    assert got[("r2", 2)] == ("error", f"turn 1 failed: {got[('r2', 1)][1]}")
    assert got[("r4", 1)] == ("error", "line 9 is not a JSON object")
    # Too long at turn 1: never sent, and every later turn says which turn failed and why.
    assert got[("r5", 1)][0] == "error" and got[("r5", 1)][1].startswith("prompt too long")
    assert got[("r5", 3)] == ("error", f"turn 1 failed: {got[('r5', 1)][1]}")
    # The whole batch first, then one by one; turn 2 only for the row still alive.
    assert engine.calls == [["r1", "r2", "r3"], ["r1"], ["r2"], ["r3"], ["r1"]]
    r1_turn2 = next(r for r in result.records if r["row_id"] == "r1" and r["turn"] == 2)
    assert "ANSWER2" in r1_turn2["prompt"]  # r1's own turn-1 answer (from its retry) is in the conversation
    assert result.counters.generation_tokens == 2 * 3 and result.seconds == 1.5


def test_an_engine_that_fails_every_prompt_raises(setup) -> None:
    job, tokenizer = setup
    with pytest.raises(ValueError, match="engine refused the batch"):
        generate_rows(FakeEngine(broken=True), rows(), job, tokenizer)
