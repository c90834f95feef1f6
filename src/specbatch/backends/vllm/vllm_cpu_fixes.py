"""Corrections to vLLM 0.32's CPU build, loaded in every vLLM process (a ``vllm.general_plugins`` entry point of this
package, so also in engine processes of their own and in ``vllm serve``) and called by the offline engine itself.

The rejection sampler's ``expand_kernel`` (vllm/v1/sample/rejection_sampler.py) spreads each request's temperature,
top-p and top-k over its draft positions before the target's probabilities are computed there. Without Triton, the
CPU build runs a C++ stand-in (``vllm.utils.cpu_triton_utils._expand_kernel_impl``) that hands it int64 copies of
its tensors: for the float temperatures and top-p values it writes into a copy and leaves the real output as
``new_empty`` left it, uninitialised. So under sampling every speculative method drew its draft positions with
arbitrary temperatures: not lossless. Found by the distribution check (specbatch.analysis.distribution): n-gram at
temperature 0.7 on the embedded model gave 81 tokens with log-probability below -8 in 6 128, spec=none gave 1. Greedy
requests never read these values (their tokens are argmaxes), which is why greedy equality held.

The same sampler applies top-k at the draft positions with ``apply_top_k_only`` (in
vllm/v1/sample/ops/topk_topp_sampler.py; without Triton, and only when no top-p is set: top-p sorts). In a step where
no request has a draft (n-gram and suffix decoding find none for a while), it gets a batch of no rows and raises on
``k.max()`` ("max(): Expected reduction dim to be specified for input.numel() == 0"): ``sampling.top_k`` with n-gram
or suffix decoding stopped the job at its first such step. A batch of no rows has nothing to mask.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)
# vLLM's own stand-in and top-k, once replaced (tests check each is still broken: when a vLLM release fixes one, drop
# its correction).
replaced: Any = None
replaced_top_k: Any = None


def expand_to_tokens(
    output: Any, input_val: Any, cu_num_tokens: Any, replace_from: float, replace_to: float, MAX_NUM_TOKENS: Any = None
) -> None:
    """``expand_kernel`` for any dtype: ``output[t]`` is its request's value (``replace_from`` read as
    ``replace_to``), for the ``cu_num_tokens[-1]`` positions the requests have; the rest of ``output`` is left."""
    import torch

    cu = cu_num_tokens.to(torch.long)
    if cu.numel() == 0:
        return
    counts = torch.diff(cu, prepend=cu.new_zeros(1))
    values = torch.where(input_val == replace_from, torch.full_like(input_val, replace_to), input_val)
    total = int(cu[-1])
    output[:total].copy_(torch.repeat_interleave(values, counts, output_size=total).to(output.dtype))


def top_k_of_any_rows(logits: Any, k: Any) -> Any:
    """vLLM's ``apply_top_k_only``, except that a batch of no rows comes back as it is."""
    if logits.shape[0] == 0:
        return logits
    return replaced_top_k(logits, k)


def correct_cpu_kernels() -> None:
    """Put :func:`expand_to_tokens` where vLLM's CPU platform takes its stand-in from when it registers them, and
    :func:`top_k_of_any_rows` where the sampler looks up ``apply_top_k_only``. The first is always before the
    registration: vLLM's worker loads the general plugins just before it registers the stand-ins
    (v1/worker/worker_base.py), and the offline engine calls this first too (for a VLLM_PLUGINS that leaves the
    plugin out). Idempotent; nothing on a build with Triton."""
    try:
        from vllm.triton_utils import HAS_TRITON
        from vllm.utils import cpu_triton_utils
        from vllm.v1.sample.ops import topk_topp_sampler
    except ImportError:  # not vLLM's CPU build
        return
    if HAS_TRITON:
        return
    global replaced, replaced_top_k
    if cpu_triton_utils._expand_kernel_impl is not expand_to_tokens:
        replaced = cpu_triton_utils._expand_kernel_impl
        cpu_triton_utils._expand_kernel_impl = expand_to_tokens
        log.debug("vLLM CPU: expand_kernel stand-in replaced (float temperatures and top-p reach the draft positions)")
    if topk_topp_sampler.apply_top_k_only is not top_k_of_any_rows:
        replaced_top_k = topk_topp_sampler.apply_top_k_only
        topk_topp_sampler.apply_top_k_only = top_k_of_any_rows
        log.debug("vLLM CPU: apply_top_k_only takes a step without drafts (top-k with n-gram or suffix decoding)")


def register() -> None:
    """The ``vllm.general_plugins`` entry point."""
    correct_cpu_kernels()
