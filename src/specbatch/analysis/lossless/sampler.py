"""The sampler a run asked for, as the referee redoes it: the target's next-token distribution after temperature,
top-k and top-p, in the order vLLM 0.32's sampler applies them (vllm/v1/sample/sampler.py: the logits divided by the
temperature first, then top-k and top-p on those, vllm/v1/sample/ops/topk_topp_sampler.py). Top-p keeps the most
likely tokens, dropping from the least likely up while what is dropped stays within 1 - top_p, and always keeps the
most likely one; top-k keeps every token whose logit reaches the k-th largest (ties kept).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from specbatch.common.errors import require
from specbatch.config import ConfigError
from specbatch.config.sampling import SamplingConfig


@dataclass(frozen=True)
class Sampler:
    """The logits processing of a sampled run."""

    temperature: float
    top_k: int = 0
    top_p: float = 1.0

    @classmethod
    def of(cls, sampling: SamplingConfig) -> Sampler:
        """A run's sampler; ConfigError for greedy, whose check is token equality, not this."""
        if sampling.temperature <= 0:
            raise ConfigError(
                "sampling.temperature=0 is greedy: a greedy run is checked by token equality with its spec=none "
                "baseline (jobs/compare.py), not by the referee"
            )
        return cls(float(sampling.temperature), int(sampling.top_k), float(sampling.top_p))

    def __post_init__(self) -> None:
        require(self.temperature > 0, f"temperature={self.temperature} must be positive")
        require(0 < self.top_p <= 1, f"top_p={self.top_p} must be in (0, 1]")
        require(self.top_k >= 0, f"top_k={self.top_k} must be 0 (off) or more")

    def at_temperature(self, factor: float) -> Sampler:
        """The same sampler with its temperature scaled by ``factor`` (an alternative the check must catch)."""
        return replace(self, temperature=self.temperature * factor)

    def sorted_probs(self, ordered: torch.Tensor, first: int | None = None) -> torch.Tensor:
        """The sampler's probabilities in the order of ``ordered`` (each row the logits sorted descending), float64
        so sums over thousands of tokens keep their digits, 0 for the tokens it drops; only the ``first`` columns
        (None: all), which must hold every token it keeps: the normalisation still counts the whole row."""
        z = ordered.to(torch.float64) / self.temperature
        if self.top_k and self.top_k < z.shape[-1]:
            # vLLM keeps every logit that reaches the k-th largest.
            z = z.masked_fill(z < z[..., self.top_k - 1 : self.top_k], -torch.inf)
        head = z[..., :first] if first is not None else z
        probs = torch.exp(head - torch.logsumexp(z, dim=-1, keepdim=True))
        if self.top_p < 1:
            # Dropped from the least likely up while what is dropped stays within 1 - top_p: token i goes when the
            # tokens before it already hold top_p or more; the most likely one always stays.
            before = torch.cumsum(probs, dim=-1) - probs
            dropped = before >= self.top_p
            dropped[..., 0] = False
            probs = probs.masked_fill(dropped, 0.0)
        return probs / probs.sum(dim=-1, keepdim=True)

    def log_probs(self, logits: torch.Tensor) -> torch.Tensor:
        """Log-probabilities of every token at each position (rows of ``logits``), -inf where the sampler keeps
        none (float64)."""
        ordered, order = logits.sort(dim=-1, descending=True)
        probs = torch.zeros(logits.shape, dtype=torch.float64).scatter(-1, order, self.sorted_probs(ordered))
        return probs.log()
