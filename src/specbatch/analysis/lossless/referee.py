"""The referee: the target model scores every sampled token of a run, teacher-forced, without speculation.

Hugging Face transformers in float32 on CPU, not vLLM: the referee must share nothing with the path it judges (no
vLLM sampler, no vLLM kernels, no prefix cache), and float32 keeps the logits close enough to the engine's that a
token the engine could draw is never judged impossible by rounding (the small models this machine runs; a GPU user
scoring a large target would point the referee at the same checkpoint on their own device). One forward pass per
sample gives the logits at every completion position: the prompt's exact token ids as the engine saw them (the rows
keep them) followed by the sample's own tokens. The prompt's part of that pass is done once for all the samples of a
prompt (a run of n samples a row writes them one after another): its keys and values are kept, and each sample reads
its own tokens on a copy of them. A prompt is most of a sample's tokens (HumanEval-edit's: about 220, against 48 new
tokens in the lossless test), so there n = 4 samples cost about 40 % of four whole passes.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from specbatch.analysis.lossless.evidence import Evidence
from specbatch.analysis.lossless.sampler import Sampler

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Scored:
    """What a referee's pass cost and covered."""

    samples: int
    tokens: int
    seconds: float
    # Prompts read (a prompt's samples one after another share its pass).
    prompts: int = 0


class Referee:
    """The target model in float32, scoring samples into an Evidence."""

    def __init__(self, model_path: str, revision: str | None = None) -> None:
        from transformers import AutoModelForCausalLM

        began = time.perf_counter()
        self.model = AutoModelForCausalLM.from_pretrained(model_path, revision=revision, dtype=torch.float32)
        self.model.eval()
        # What the last score() covered and took.
        self.last: Scored | None = None
        # The last prompt read (all but its last token) and the model's keys and values after it.
        self._prompt: tuple[tuple[int, ...], Any] | None = None
        self._prompts_read = 0
        log.info("referee: %s loaded in float32 in %.1f s", model_path, time.perf_counter() - began)

    def logits(self, prompt: list[int], completion: list[int]) -> torch.Tensor:
        """The target's logits at each completion position: row i predicts completion[i]. The pass over the prompt
        (all but its last token) is kept for the next call with the same prompt."""
        if len(prompt) < 2:
            ids = torch.tensor([prompt + completion], dtype=torch.long)
            with torch.inference_mode():
                out = self.model(input_ids=ids).logits[0]
            return out[len(prompt) - 1 : len(prompt) + len(completion) - 1].float()
        # Row 0 is read after the prompt's last token, row i after completion[i - 1].
        ids = torch.tensor([[prompt[-1], *completion[:-1]]], dtype=torch.long)
        with torch.inference_mode():
            # A copy: the pass appends the sample's keys and values to the cache it is given.
            past = copy.deepcopy(self._past(tuple(prompt[:-1])))
            return self.model(input_ids=ids, past_key_values=past, use_cache=True).logits[0].float()

    def _past(self, head: tuple[int, ...]) -> Any:
        """The model's keys and values after ``head``, read once for the samples of one prompt in a row."""
        if self._prompt is None or self._prompt[0] != head:
            with torch.inference_mode():
                out = self.model(input_ids=torch.tensor([head], dtype=torch.long), use_cache=True)
            self._prompt = (head, out.past_key_values)
            self._prompts_read += 1
        return self._prompt[1]

    def score(self, rows: Iterable[dict[str, Any]], sampler: Sampler, evidence: Evidence | None = None) -> Evidence:
        """Every row's completion scored into ``evidence`` (a new one for ``sampler`` by default). A row needs
        ``prompt_token_ids`` and ``completion_token_ids``; error rows (no completion) are skipped."""
        evidence = evidence or Evidence(sampler)
        began, samples, tokens, prompts = time.perf_counter(), 0, 0, self._prompts_read
        for row in rows:
            prompt, completion = row.get("prompt_token_ids"), row.get("completion_token_ids")
            if not prompt or not completion:
                continue
            where = f"row {row.get('row_id')} turn {row.get('turn', 1)} sample {row.get('sample_index', 0)}"
            evidence.add(self.logits(list(prompt), list(completion)), list(completion), 0, where)
            samples, tokens = samples + 1, tokens + len(completion)
        self._prompt = None
        self.last = Scored(samples, tokens, time.perf_counter() - began, self._prompts_read - prompts)
        log.info(
            "referee: %d tokens of %d samples (%d prompts) scored in %.1f s",
            tokens,
            samples,
            self.last.prompts,
            self.last.seconds,
        )
        return evidence
