"""The drafter spec=simulate runs: proposes k placeholder tokens, costs nothing, and leaves acceptance to vLLM's
synthetic rejection sampler (``rejection_sample_method: synthetic``), which accepts position i of a draft with the
profile's conditional rate whatever the token is. So the target runs as it would beside a drafter with that
acceptance profile, without the drafter: its own cost is not counted (the simulated tok/s is the target's side).

Loaded by vLLM as a ``custom_class`` proposer (``speculative_config.model`` names this class; vLLM imports it in the
process that runs the model). A drafter that drafts only at some steps (n-gram and suffix decoding find no match for
a while) is simulated by proposing at that share of steps (:data:`COVERAGE_ENV`, drawn from a fixed seed): a step
without a draft verifies one token, which is what makes such a method cheaper and slower than its acceptance alone
says.

The placeholder is the request's latest token, repeated: accepted placeholders become the row's text, so a simulated
row's text is not a real output (its rows say ``method: simulate``).
"""

from __future__ import annotations

import os
import random
from typing import Any

# The share of steps at which the carrier drafts (0 < share <= 1), set by the backend before the engine starts (an
# engine process of its own inherits it); unset: every step.
COVERAGE_ENV = "SPECBATCH_SIMULATE_COVERAGE"
# The seed of the coverage draws: a rerun drafts at the same steps.
SEED = 0
# The class vLLM loads (speculative_config.model).
CLASS_PATH = f"{__name__}.Carrier"


class Carrier:
    """vLLM's custom-class proposer interface (vllm/v1/spec_decode/custom_class_proposer.py): built with the
    VllmConfig, asked ``propose`` once per step for every request in the batch."""

    def __init__(self, vllm_config: Any) -> None:
        self.k = int(vllm_config.speculative_config.num_speculative_tokens)
        self.max_model_len = int(vllm_config.model_config.max_model_len)
        self.coverage = float(os.environ.get(COVERAGE_ENV) or 1.0)
        self._random = random.Random(SEED)

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        """Nothing to load."""

    def propose(
        self, sampled_token_ids: list[list[int]], num_tokens_no_spec: Any, token_ids_cpu: Any, **_: Any
    ) -> list[list[int]]:
        drafts: list[list[int]] = []
        for i, sampled in enumerate(sampled_token_ids):
            length = int(num_tokens_no_spec[i])
            # As vLLM's n-gram proposer: nothing for a request that sampled nothing this step (still in prefill) or
            # whose draft would not fit; the coverage draw only for one that could draft, so it is the share of those.
            if not sampled or length + self.k >= self.max_model_len:
                drafts.append([])
            elif self.coverage < 1.0 and self._random.random() >= self.coverage:
                drafts.append([])
            else:
                drafts.append([int(token_ids_cpu[i, length - 1])] * self.k)
        return drafts
