"""The ``sampling`` section: how each completion is drawn (group ``sampling/``; vLLM's ``SamplingParams``), and the
seed of each sample."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace

from specbatch.common.errors import require
from specbatch.config.declarations import ABSENT_WHEN_NULL


@dataclass
class SamplingConfig:
    """vLLM ``SamplingParams`` (group ``sampling/``)."""

    # 0 is greedy.
    temperature: float = 0.0
    top_p: float = 1.0
    # 0 keeps every token (vLLM's "off").
    top_k: int = 0
    # New tokens per completion.
    max_tokens: int = 256
    # Per-request seed; makes sampled (temperature > 0) runs repeatable.
    seed: int | None = 0
    # Completions per prompt; one output row each. Each is a request of its own (n=1) with its own seed
    # (sample_seed) and its own speculative figures: vLLM reports those only for n=1, and a rerun reproduces each.
    n: int = 1
    # Generate sampling.max_tokens per completion whatever the model says (vLLM's ignore_eos): equal lengths, so tok/s
    # compares set-ups whose text ends differently; spec=simulate always runs so. null: stop at the end of the text.
    # Left out of the digests while null.
    ignore_eos: bool | None = field(default=None, metadata={ABSENT_WHEN_NULL: True})

    def __post_init__(self) -> None:
        require(
            self.temperature >= 0,
            f"sampling.temperature={self.temperature} is negative: use 0 for greedy or a positive value",
        )
        require(0 < self.top_p <= 1, f"sampling.top_p={self.top_p} must be in (0, 1], e.g. sampling.top_p=1.0")
        require(self.top_k >= 0, f"sampling.top_k={self.top_k} must be 0 (off) or 1 or more")
        require(self.max_tokens >= 1, f"sampling.max_tokens={self.max_tokens} must be 1 or more")
        require(self.n >= 1, f"sampling.n={self.n} must be 1 or more")
        # Refused rather than warned: the n completions of a row would be one completion n times (the sample seeds
        # differ, but with only one token allowed at each step they choose nothing), n times the cost for nothing.
        only_one = "sampling.temperature=0 (greedy)" if self.temperature == 0 else "sampling.top_k=1"
        require(
            self.n == 1 or (self.temperature > 0 and self.top_k != 1),
            f"sampling.n={self.n} with {only_one} gives {self.n} identical completions per row: one token can be "
            "chosen at each step. Set sampling.n=1, or sample (e.g. sampling=sampled, or sampling.temperature=0.7)",
        )

    def for_sample(self, seed: int | None) -> SamplingConfig:
        """One sample's request: this sampling with n=1 and that sample's seed (see :func:`sample_seed`)."""
        return replace(self, n=1, seed=seed)


def sample_seed(seed: int | None, setup: str, row_id: str, sample: int) -> int | None:
    """The seed of one sample: a digest of ``sampling.seed``, the speculative set-up, the row and the sample index,
    so a rerun reproduces every sample and a resumed shard regenerates the same ones. The set-up is in it because a
    speculative run and its spec=none baseline are compared as two independent samples of one distribution
    (specbatch.analysis.distribution): with one seed they would draw their first token from the same generator state
    and share it. None (no seed) stays None: vLLM then draws from its own random state."""
    if seed is None:
        return None
    digest = hashlib.sha256(f"{seed}\0{setup}\0{row_id}\0{sample}".encode()).digest()
    # 31 bits: a seed every backend takes (the OpenAI API's is a signed integer).
    return int.from_bytes(digest[:4], "big") >> 1
