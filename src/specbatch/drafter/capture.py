"""The target's hidden states that an EAGLE-3 head learns from, captured on the CPU with Hugging Face transformers.

What speculators' trainer reads for each sequence (speculators/train/data.py): the outputs of three of the target's
layers, EAGLE-3's auxiliary layers, and the last layer's output before the final norm, stacked as
``[tokens, aux layers + 1, hidden]``. Layer id k is vLLM's (and speculators'): the residual stream after k decoder
layers, which is transformers' ``hidden_states[k]`` for k below the number of layers L. The defaults are vLLM's and
speculators' own, ``[2, L // 2, L - 3]``. The last slot is read by a hook on the last decoder layer: transformers'
``hidden_states[L]`` has the final norm applied, and speculators applies the target's norm itself when it builds the
targets (storing the normed state would norm it twice: the greedy tokens are then reproduced half as often).

A GPU user captures the same layers through vLLM's ``extract_hidden_states`` method
(:mod:`specbatch.drafter.capture_vllm`, ``--capture vllm``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch

from specbatch.config import ConfigError

log = logging.getLogger(__name__)


def default_aux_layers(num_layers: int) -> list[int]:
    """EAGLE-3's auxiliary layers of a target with ``num_layers`` decoder layers, as vLLM and speculators pick them."""
    return [2, num_layers // 2, num_layers - 3]


class HiddenStateCapture:
    """A target model loaded in float32 on the CPU, answering token ids with their hidden states."""

    def __init__(self, model_path: str, revision: str | None = None, aux_layers: Sequence[int] | None = None) -> None:
        from transformers import AutoModelForCausalLM

        self.model: Any = AutoModelForCausalLM.from_pretrained(model_path, revision=revision, dtype=torch.float32)
        self.model.eval()
        config = self.model.config
        self.num_layers = int(config.num_hidden_layers)
        self.hidden_size = int(config.hidden_size)
        self.aux_layers = list(aux_layers) if aux_layers else default_aux_layers(self.num_layers)
        bad = [k for k in self.aux_layers if not 0 <= k < self.num_layers]
        if bad:
            raise ConfigError(
                f"aux layers {bad} are not layers of {model_path} (0 to {self.num_layers - 1}): EAGLE-3 reads three "
                f"of them, by default {default_aux_layers(self.num_layers)}"
            )
        self._last: torch.Tensor | None = None
        self.model.get_decoder().layers[-1].register_forward_hook(self._keep_last)

    def _keep_last(self, module: Any, args: Any, output: Any) -> None:
        self._last = output[0] if isinstance(output, tuple) else output

    @property
    def layer_ids(self) -> list[int]:
        """The layers of each slot of :meth:`__call__`'s answer: the auxiliary ones, then L (before the norm)."""
        return [*self.aux_layers, self.num_layers]

    @torch.inference_mode()
    def __call__(self, token_ids: Sequence[int]) -> torch.Tensor:
        """``[tokens, len(layer_ids), hidden]`` float32 hidden states of one sequence."""
        ids = torch.as_tensor(list(token_ids), dtype=torch.long)[None]
        out = self.model(ids, output_hidden_states=True, use_cache=False)
        assert self._last is not None, "the hook on the last decoder layer ran"
        slots = [out.hidden_states[k][0] for k in self.aux_layers] + [self._last[0]]
        self._last = None
        return torch.stack(slots, dim=1)

    def many(self, sequences: Sequence[Sequence[int]]) -> list[torch.Tensor]:
        """:meth:`__call__` of each sequence (one at a time: no padding to compute on a CPU)."""
        return [self(ids) for ids in sequences]
