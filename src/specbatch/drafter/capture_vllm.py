"""The target's hidden states captured by vLLM on a GPU (``jobs/export_drafter_data.py RUN OUT --capture vllm``), the
same slots :mod:`specbatch.drafter.capture` reads with transformers on the CPU, at the speed of vLLM's prefill.

Written against vLLM 0.32's source, not run here (no GPU on these machines; tests check the settings vLLM's config
classes accept and the reading of the files it writes):

- ``speculative_config``: method ``extract_hidden_states`` with ``num_speculative_tokens: 1`` and the layer ids in
  ``draft_model_config.hf_config.eagle_aux_hidden_state_layer_ids`` (vllm/config/speculative.py). Layer id k is the
  residual stream after k decoder layers (models/llama.py adds it after layer k - 1), so ``[2, 15, 27, 30]`` for
  SmolLM2 is our three auxiliary layers and the last layer before the final norm, the slots the CPU capture stores.
- ``kv_transfer_config``: vLLM's ``ExampleHiddenStatesConnector`` as ``kv_producer``, writing one
  ``<request id>.safetensors`` per request into ``shared_storage_path`` with ``hidden_states`` ``[tokens, layers,
  hidden]`` and ``token_ids`` (the prompt's; generated tokens only with ``include_output_tokens``, which we do not
  need: the whole sequence, prompt and answer, is the prompt of a one-token request, as speculators' own data
  generation does). No lock (``use_synchronization_lock: false``): the files are read after ``generate`` returns,
  when every write is finished.
- On vLLM's CPU build the connector fails (it copies on a CUDA stream into pinned memory): refused in one line.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specbatch.config import ConfigError
from specbatch.drafter.capture import default_aux_layers

log = logging.getLogger(__name__)

CONNECTOR = "ExampleHiddenStatesConnector"


def engine_args(layer_ids: Sequence[int], storage: Path) -> dict[str, Any]:
    """vllm.LLM's keyword arguments that make every request write its hidden states at ``layer_ids`` to ``storage``."""
    return {
        "speculative_config": {
            "method": "extract_hidden_states",
            "num_speculative_tokens": 1,
            "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": list(layer_ids)}},
        },
        "kv_transfer_config": {
            "kv_connector": CONNECTOR,
            "kv_role": "kv_producer",
            "kv_connector_extra_config": {
                "shared_storage_path": str(storage),
                "use_synchronization_lock": False,
                "num_writer_threads": 8,
            },
        },
    }


def read_capture(path: Path, token_ids: Sequence[int]) -> Any:
    """One request's file: its ``hidden_states`` after checking its ``token_ids`` are the sequence we sent."""
    from safetensors.torch import load_file

    data = load_file(str(path), device="cpu")
    sent = list(token_ids)
    got = [int(t) for t in data["token_ids"].tolist()]
    if got != sent:
        raise ConfigError(
            f"{path} holds the hidden states of {len(got)} other tokens than the {len(sent)} sent: vLLM's connector "
            "changed its format; capture with --capture transformers"
        )
    return data["hidden_states"]


class VllmHiddenStateCapture:
    """A vLLM engine on the GPU that answers sequences of token ids with their hidden states (CPU tensors)."""

    def __init__(
        self,
        model_path: str,
        revision: str | None = None,
        aux_layers: Sequence[int] | None = None,
        tensor_parallel_size: int = 1,
    ) -> None:
        import torch

        if not torch.cuda.is_available():
            raise ConfigError(
                "--capture vllm needs a CUDA GPU (vLLM's hidden-states connector copies on a CUDA stream into pinned "
                "memory): on this machine use --capture transformers"
            )
        from transformers import AutoConfig
        from vllm import LLM

        config = AutoConfig.from_pretrained(model_path, revision=revision)
        self.num_layers = int(config.num_hidden_layers)
        self.hidden_size = int(config.hidden_size)
        self.aux_layers = list(aux_layers) if aux_layers else default_aux_layers(self.num_layers)
        self.storage = Path(tempfile.mkdtemp(prefix="specbatch-hidden-states-"))
        self.llm = LLM(
            model=model_path,
            revision=revision,
            tensor_parallel_size=tensor_parallel_size,
            **engine_args(self.layer_ids, self.storage),
        )

    @property
    def layer_ids(self) -> list[int]:
        return [*self.aux_layers, self.num_layers]

    def many(self, sequences: Sequence[Sequence[int]]) -> list[Any]:
        """``[tokens, len(layer_ids), hidden]`` float32 hidden states of each sequence, in order."""
        import torch
        from vllm import SamplingParams, TokensPrompt

        prompts = [TokensPrompt(prompt_token_ids=list(ids)) for ids in sequences]
        outputs = self.llm.generate(prompts, SamplingParams(max_tokens=1), use_tqdm=False)
        states = []
        for ids, output in zip(sequences, outputs, strict=True):
            path = self.storage / f"{output.request_id}.safetensors"
            states.append(read_capture(path, ids).to(torch.float32))
            path.unlink()
        return states

    def __call__(self, token_ids: Sequence[int]) -> Any:
        return self.many([token_ids])[0]

    def close(self) -> None:
        shutil.rmtree(self.storage, ignore_errors=True)
