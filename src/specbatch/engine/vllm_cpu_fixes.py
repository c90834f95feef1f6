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
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)
# vLLM's own stand-in, once replaced (tests check it is still broken: when a vLLM release fixes it, drop this module).
replaced: Any = None


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


def correct_cpu_kernels() -> None:
    """Put :func:`expand_to_tokens` where vLLM's CPU platform takes its stand-in from when it registers them. That is
    always after this: vLLM's worker loads the general plugins just before it registers the stand-ins
    (v1/worker/worker_base.py), and the offline engine calls this first too (for a VLLM_PLUGINS that leaves the
    plugin out). Idempotent; nothing on a build with Triton."""
    try:
        from vllm.triton_utils import HAS_TRITON
        from vllm.utils import cpu_triton_utils
    except ImportError:  # not vLLM's CPU build
        return
    if HAS_TRITON or cpu_triton_utils._expand_kernel_impl is expand_to_tokens:
        return
    global replaced
    replaced = cpu_triton_utils._expand_kernel_impl
    cpu_triton_utils._expand_kernel_impl = expand_to_tokens
    log.debug("vLLM CPU: expand_kernel stand-in replaced (float temperatures and top-p reach the draft positions)")


def register() -> None:
    """The ``vllm.general_plugins`` entry point."""
    correct_cpu_kernels()
