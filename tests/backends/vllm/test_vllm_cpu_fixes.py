"""The corrections to vLLM 0.32's CPU build (backends/vllm/vllm_cpu_fixes.py), in every vLLM process: temperatures
and top-p values reach every draft position (the rejection sampler's expand_kernel stand-in), and top-k takes a step in
which no request has drafts (tests/analysis/test_distribution_cpu.py samples with top-k and n-gram on real vLLM)."""

from __future__ import annotations

from importlib.metadata import entry_points

import pytest
import torch

from specbatch.backends.vllm import vllm_cpu_fixes
from specbatch.backends.vllm.vllm_cpu_fixes import correct_cpu_kernels, expand_to_tokens, top_k_of_any_rows


def test_each_requests_value_fills_its_draft_positions_in_its_own_dtype() -> None:
    out = torch.full((7,), 9.0)
    expand_to_tokens(out, torch.tensor([0.7, -1.0, 1.3]), torch.tensor([2, 5, 6]), -1, 1)
    assert out.tolist() == pytest.approx([0.7, 0.7, 1.0, 1.0, 1.0, 1.3, 9.0])  # past the last position: left
    ints = torch.zeros(3, dtype=torch.int32)
    expand_to_tokens(ints, torch.tensor([5, 0], dtype=torch.int32), torch.tensor([1, 3]), 0, 50)
    assert ints.tolist() == [5, 50, 50]
    expand_to_tokens(ints, torch.tensor([], dtype=torch.int32), torch.tensor([], dtype=torch.long), 0, 0)


def test_vllms_own_stand_in_still_leaves_float_values_unwritten() -> None:
    # Why the correction exists; when a vLLM release fixes its stand-in, this fails: drop vllm_cpu_fixes then.
    correct_cpu_kernels()
    if vllm_cpu_fixes.replaced is None:
        pytest.skip("this vLLM build runs Triton kernels: there is no CPU stand-in to correct")
    import vllm._custom_ops  # noqa: F401  (loads the C++ ops the stand-in calls)

    out = torch.full((3,), 9.0)
    vllm_cpu_fixes.replaced(out, torch.tensor([0.7, 0.5]), torch.tensor([2, 3]), -1, 1)
    assert out.tolist() == [9.0, 9.0, 9.0]


def test_top_k_of_no_rows_is_no_rows_and_of_some_rows_vllms_own() -> None:
    correct_cpu_kernels()
    if vllm_cpu_fixes.replaced_top_k is None:
        pytest.skip("this vLLM build runs Triton kernels: its top-k does not go through apply_top_k_only")
    from vllm.v1.sample.ops import topk_topp_sampler

    assert topk_topp_sampler.apply_top_k_only is top_k_of_any_rows  # where vLLM's top-k-top-p looks it up
    none = torch.empty(0, 5)
    assert top_k_of_any_rows(none, torch.empty(0, dtype=torch.int32)) is none
    logits = torch.tensor([[0.1, 3.0, 2.0, -1.0], [5.0, 4.0, 3.0, 2.0]])
    masked = top_k_of_any_rows(logits.clone(), torch.tensor([2, 1]))
    assert masked.isinf().tolist() == [[True, False, False, True], [False, True, True, True]]
    # Why the correction exists; when a vLLM release takes an empty batch, this fails: drop that correction then.
    with pytest.raises(RuntimeError, match="numel"):
        vllm_cpu_fixes.replaced_top_k(torch.empty(0, 5), torch.empty(0, dtype=torch.int32))


def test_vllm_loads_the_corrections_in_each_of_its_processes() -> None:
    plugins = {e.name: e.value for e in entry_points(group="vllm.general_plugins")}
    assert plugins.get("specbatch_cpu_fixes") == "specbatch.backends.vllm.vllm_cpu_fixes:register"


def synthetic_batch() -> dict:
    """Three requests with 3, 2 and 3 drafts (the second padded with -1 at its last position): uniform draws against
    conditional rates 0.9, 0.5, 0.2 per position."""
    return {
        "cu": torch.tensor([3, 5, 8]),
        "drafts": torch.tensor([11, 12, 13, 21, -1, 31, 32, 33]),
        # Request 0: accepts 0 and 1, rejects 2; request 1: accepts 0, its padded 1 is never accepted; request 2:
        # accepts every position (0.1 < 0.9, 0.4 < 0.5, 0.1 < 0.2), then its bonus token.
        "uniform": torch.tensor([0.5, 0.4, 0.3, 0.1, 0.0, 0.1, 0.4, 0.1], dtype=torch.float64),
        "rates": torch.tensor([0.9, 0.5, 0.2]),
        "target": torch.tensor([101, 102, 103, 201, 202, 301, 302, 303]),
        "bonus": torch.tensor([[109], [209], [309]]),
    }


EXPECTED = [[11, 12, 103, -7], [21, 202, -7, -7], [31, 32, 33, 309]]


def test_synthetic_mode_accepts_by_the_rates_whatever_the_tokens() -> None:
    b = synthetic_batch()
    out = torch.full((3, 4), -7, dtype=torch.int32)
    vllm_cpu_fixes.synthetic_greedy(
        out, b["cu"], b["drafts"], b["target"], b["bonus"], None, 3, b["uniform"], b["rates"], True
    )
    assert out.tolist() == EXPECTED
    # Sampled requests: a rejected position takes the recovered token; greedy requests are the other kernel's.
    out = torch.full((3, 4), -7, dtype=torch.int32)
    greedy = torch.tensor([False, True, False])
    vllm_cpu_fixes.synthetic_random(
        out,
        b["cu"],
        b["drafts"],
        None,
        None,
        b["bonus"],
        b["target"],
        b["uniform"],
        greedy,
        3,
        50,
        b["rates"],
        True,
        True,
    )
    assert out.tolist() == [EXPECTED[0], [-7, -7, -7, -7], EXPECTED[2]]
    out = torch.full((3, 4), -7, dtype=torch.int32)
    vllm_cpu_fixes.synthetic_greedy(
        out, b["cu"], b["drafts"], b["target"], b["bonus"], greedy, 3, b["uniform"], b["rates"], True
    )
    assert out.tolist() == [[-7, -7, -7, -7], EXPECTED[1], [-7, -7, -7, -7]]


def test_vllms_own_stand_ins_still_refuse_synthetic_mode() -> None:
    # Why the synthetic kernels exist; when a vLLM release runs synthetic mode on CPU, this fails: drop them then.
    correct_cpu_kernels()
    if vllm_cpu_fixes.replaced_greedy is None:
        pytest.skip("this vLLM build runs Triton kernels: there is no CPU stand-in to extend")
    from vllm.utils import cpu_triton_utils

    assert cpu_triton_utils._rejection_greedy_sample_kernel_impl is vllm_cpu_fixes.synthetic_greedy
    b = synthetic_batch()
    with pytest.raises(AssertionError, match="Synthetic acceptance not supported"):
        vllm_cpu_fixes.replaced_greedy(
            torch.zeros(3, 4, dtype=torch.int32),
            b["cu"],
            b["drafts"],
            b["target"],
            b["bonus"],
            None,
            3,
            b["uniform"],
            b["rates"],
            True,
        )
