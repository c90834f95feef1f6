"""The referee's evidence on synthetic next-token distributions: the sampler redone as vLLM does it, a sampler that
draws from the asked distribution found consistent, and the planted faults (a temperature 5 % high, a top-p of 0.9
where 0.95 was asked, the greedy rule under sampling) found, each next to the same run without its fault."""

from __future__ import annotations

import pytest
import torch

from specbatch.analysis.lossless.evidence import Evidence
from specbatch.analysis.lossless.sampler import Sampler
from specbatch.config import ConfigError
from specbatch.config.sampling import SamplingConfig

VOCAB = 400
ASKED = Sampler(0.7, 0, 0.95)


def _logits(generator: torch.Generator, positions: int) -> torch.Tensor:
    """Language-model-like rows: Zipf-shaped logits (a few likely tokens, a long tail) in a random order."""
    shape = -1.2 * torch.log(torch.arange(1, VOCAB + 1, dtype=torch.float32))
    rows = [shape[torch.randperm(VOCAB, generator=generator)] for _ in range(positions)]
    return torch.stack(rows) + 0.3 * torch.randn(positions, VOCAB, generator=generator)


def _run(drawn_by: Sampler, samples: int = 60, positions: int = 50, greedy_share: float = 0.0) -> Evidence:
    """A run of ``samples`` completions whose tokens ``drawn_by`` draws, scored against ASKED; with
    ``greedy_share``, that share of the later tokens is the target's argmax instead (a drafted token kept whenever
    it is the argmax: the greedy rule where sampling was asked)."""
    generator = torch.Generator().manual_seed(7)
    evidence = Evidence(ASKED)
    for sample in range(samples):
        logits = _logits(generator, positions)
        tokens = torch.multinomial(drawn_by.log_probs(logits).exp().float(), 1, generator=generator).flatten()
        if greedy_share:
            greedy = torch.rand(positions, generator=generator) < greedy_share
            greedy[0] = False
            tokens = torch.where(greedy, logits.argmax(dim=-1), tokens)
        evidence.add(logits, tokens.tolist(), 0, f"sample {sample}")
    return evidence


def test_the_sampler_keeps_what_vllms_own_top_k_top_p_keeps() -> None:
    from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p_pytorch

    generator = torch.Generator().manual_seed(0)
    logits = _logits(generator, 64)
    for sampler in (Sampler(0.7, 0, 0.95), Sampler(1.0, 20, 1.0), Sampler(0.5, 50, 0.8)):
        ours = sampler.log_probs(logits).exp()
        tempered = (logits / sampler.temperature).clone()
        k = torch.full((64,), sampler.top_k) if sampler.top_k else None
        p = torch.full((64,), sampler.top_p) if sampler.top_p < 1 else None
        theirs = apply_top_k_top_p_pytorch(tempered, k, p).softmax(dim=-1).double()
        assert torch.equal(ours > 0, theirs > 0), sampler
        assert torch.allclose(ours, theirs, atol=1e-6), sampler


def test_greedy_is_not_the_referees() -> None:
    with pytest.raises(ConfigError, match="token equality"):
        Sampler.of(SamplingConfig(temperature=0.0))


def test_a_sampler_drawing_what_was_asked_is_consistent() -> None:
    verdict = _run(ASKED).verdict()
    assert verdict.verdict != "differs", verdict.why
    assert verdict.figures["tokens"] == 3000 and verdict.figures["p_value"] >= 0.001


@pytest.mark.parametrize(
    ("fault", "drawn_by", "greedy_share"),
    [
        ("a temperature 5 % high", ASKED.at_temperature(1.05), 0.0),
        ("top-p 0.9 where 0.95 was asked", Sampler(0.7, 0, 0.9), 0.0),
        ("the greedy rule on 15 % of the later tokens", ASKED, 0.15),
    ],
)
def test_a_planted_fault_differs(fault: str, drawn_by: Sampler, greedy_share: float) -> None:
    verdict = _run(drawn_by, greedy_share=greedy_share).verdict()
    assert verdict.verdict == "differs", (fault, verdict.why)
    # The same run without its fault does not differ: the test finds the fault, not its own set-up.
    assert _run(ASKED).verdict().verdict != "differs"


def test_the_verdict_says_what_it_could_have_caught_and_what_it_needs() -> None:
    small = _run(ASKED, samples=8).verdict()
    assert small.verdict == "too few tokens" and small.figures["tokens_needed"] > small.figures["tokens"]
    large = _run(ASKED, samples=60)
    error = large.detectable()
    assert error is not None and error <= large.detectable(0.25)  # type: ignore[operator]
    # The power is a probability that grows with the run's size.
    assert 0 <= large.power(1.05, 0.1) <= large.power(1.05) <= 1


def test_a_token_just_past_the_top_p_edge_is_not_proof_one_far_past_it_is() -> None:
    """The referee's logits and the engine's round differently: a token the referee's top-p drops by a hair is set
    apart, not called impossible; one deep in the dropped tail is proof."""
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.1502, 0.0498] + [1e-9] * 4]))
    evidence = Evidence(Sampler(1.0, 0, 0.95))
    # Ahead of token 3: 0.9502, past 0.95 (dropped) by less than 0.001; ahead of token 7: all the mass.
    evidence.add(logits.repeat(2, 1), [3, 7], 1, "edge")
    assert [t["token"] for t in evidence.at_edge] == [3] and [t["token"] for t in evidence.impossible] == [7]
    assert evidence.verdict().verdict == "differs"
