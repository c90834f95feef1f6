"""spec=simulate's drafter (backends/vllm/simulate_carrier.py): k placeholders per request that can draft, at the
share of steps the profile says, from a fixed seed."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from specbatch.backends.vllm.simulate_carrier import COVERAGE_ENV, Carrier


def carrier(monkeypatch: pytest.MonkeyPatch, coverage: str | None, k: int = 3, max_len: int = 64) -> Carrier:
    if coverage is None:
        monkeypatch.delenv(COVERAGE_ENV, raising=False)
    else:
        monkeypatch.setenv(COVERAGE_ENV, coverage)
    config = SimpleNamespace(
        speculative_config=SimpleNamespace(num_speculative_tokens=k),
        model_config=SimpleNamespace(max_model_len=max_len),
    )
    return Carrier(config)


def test_every_request_that_can_draft_gets_k_copies_of_its_latest_token(monkeypatch: pytest.MonkeyPatch) -> None:
    c = carrier(monkeypatch, None)
    tokens = np.zeros((4, 64), dtype=np.int32)
    tokens[0, :5] = [1, 2, 3, 4, 5]
    tokens[2, :7] = [9, 9, 9, 9, 9, 9, 8]
    lengths = np.array([5, 3, 7, 62])
    # Request 1 sampled nothing this step (prefill in pieces); request 3's draft would not fit in max_model_len.
    drafts = c.propose([[5], [], [8], [4]], lengths, tokens)
    assert drafts == [[5, 5, 5], [], [8, 8, 8], []]


def test_it_drafts_at_the_profiles_share_of_steps_the_same_steps_each_run(monkeypatch: pytest.MonkeyPatch) -> None:
    tokens = np.ones((8, 64), dtype=np.int32)
    lengths = np.full(8, 10)

    def drafted(c: Carrier) -> list[bool]:
        return [bool(d) for _ in range(250) for d in c.propose([[1]] * 8, lengths, tokens)]

    first = drafted(carrier(monkeypatch, "0.6"))
    assert abs(sum(first) / len(first) - 0.6) < 0.03  # 2,000 draws: the standard error is 0.011
    assert drafted(carrier(monkeypatch, "0.6")) == first
    assert all(drafted(carrier(monkeypatch, "1.0")))
