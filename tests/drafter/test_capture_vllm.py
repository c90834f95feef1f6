"""The GPU capture through vLLM's extract_hidden_states, as far as a CPU machine can check it: the settings are ones
vLLM's own config classes accept and name its registered connector, the files it writes are read back (and a file
of other tokens refused), and on the CPU build the capture is refused in one line before anything loads."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from specbatch.config import ConfigError
from specbatch.drafter.capture_vllm import CONNECTOR, VllmHiddenStateCapture, engine_args, read_capture


def test_the_settings_are_vllms_own(tmp_path: Path) -> None:
    from vllm.config import KVTransferConfig
    from vllm.config.speculative import SpeculativeMethod
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

    args = engine_args([2, 15, 27, 30], tmp_path)
    kv = KVTransferConfig(**args["kv_transfer_config"])
    assert kv.is_kv_producer and not kv.is_kv_consumer
    assert kv.get_from_extra_config("shared_storage_path", "/tmp") == str(tmp_path)
    assert kv.get_from_extra_config("use_synchronization_lock", True) is False
    assert CONNECTOR in KVConnectorFactory._registry
    spec = args["speculative_config"]
    assert spec["method"] in typing.get_args(SpeculativeMethod)
    assert spec["draft_model_config"]["hf_config"]["eagle_aux_hidden_state_layer_ids"] == [2, 15, 27, 30]


def test_a_requests_file_is_read_and_one_of_other_tokens_refused(tmp_path: Path) -> None:
    states = torch.randn(5, 4, 8)
    path = tmp_path / "req-1.safetensors"
    save_file({"hidden_states": states, "token_ids": torch.tensor([1, 2, 3, 4, 5])}, str(path))
    assert torch.equal(read_capture(path, [1, 2, 3, 4, 5]), states)
    with pytest.raises(ConfigError, match="other tokens than the 4 sent"):
        read_capture(path, [1, 2, 3, 4])


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is the CPU build's")
def test_the_cpu_build_is_refused_before_anything_loads() -> None:
    with pytest.raises(ConfigError, match="--capture vllm needs a CUDA GPU"):
        VllmHiddenStateCapture("/nonexistent/model")
