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

The CPU stand-ins of the two rejection kernels refuse vLLM's synthetic mode ("Synthetic acceptance not supported
with CPU sampling"), which spec=simulate runs: in that mode (only) :func:`synthetic_greedy` and
:func:`synthetic_random` do what the Triton kernels do (vllm/v1/sample/rejection_sampler.py): position i of a
request's draft is accepted when its uniform draw is below the conditional rate of i (a padded draft, -1, never),
the first rejection ends the draft with the target's token there (the argmax; a sampled request's recovered token),
and a draft accepted whole gets the bonus token.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)
# vLLM's own stand-in and top-k, once replaced (tests check each is still broken: when a vLLM release fixes one, drop
# its correction).
replaced: Any = None
replaced_top_k: Any = None
replaced_greedy: Any = None
replaced_random: Any = None


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


def _synthetic(a: dict[str, Any], fallback: str, skip: list[bool] | None) -> None:
    """The synthetic rule, on a kernel's arguments ``a`` by name, for the requests ``skip`` leaves (None: every
    request); ``fallback``: the argument holding the token at each draft position when it is rejected."""
    import torch

    ends = a["cu_num_draft_tokens"].tolist()
    drafts, draws = a["draft_token_ids"].tolist(), a["uniform_probs"].tolist()
    rate, kept = a["synthetic_conditional_rates"].tolist(), a[fallback].tolist()
    bonuses = a["bonus_token_ids"].reshape(-1).tolist()
    output = a["output_token_ids"]
    values = output.tolist()
    for request, end in enumerate(ends):
        if skip is not None and skip[request]:
            continue
        start = ends[request - 1] if request else 0
        for pos in range(end - start):
            token = drafts[start + pos]
            if token >= 0 and draws[start + pos] < rate[pos]:
                values[request][pos] = token
            else:
                values[request][pos] = kept[start + pos]
                break
        else:
            values[request][end - start] = bonuses[request]
    output.copy_(torch.tensor(values, dtype=output.dtype))


# The parameters of the two rejection kernels, in the order vLLM launches them (vllm/v1/sample/rejection_sampler.py):
# the dispatcher calls a stand-in with the kernel's arguments, by position or by these names.
_GREEDY = (
    "output_token_ids cu_num_draft_tokens draft_token_ids target_argmax bonus_token_ids is_greedy max_spec_len "
    "uniform_probs synthetic_conditional_rates SYNTHETIC_MODE"
).split()
_RANDOM = (
    "output_token_ids cu_num_draft_tokens draft_token_ids draft_probs target_probs bonus_token_ids "
    "recovered_token_ids uniform_probs is_greedy max_spec_len vocab_size synthetic_conditional_rates NO_DRAFT_PROBS "
    "SYNTHETIC_MODE"
).split()


def synthetic_greedy(*args: Any, **kwargs: Any) -> None:
    """``rejection_greedy_sample_kernel``: vLLM's stand-in, or in synthetic mode the rule for the greedy requests."""
    a = dict(zip(_GREEDY, args, strict=False)) | kwargs
    if not a.get("SYNTHETIC_MODE"):
        replaced_greedy(*args, **kwargs)
        return
    greedy = a["is_greedy"]
    _synthetic(a, "target_argmax", None if greedy is None else [not g for g in greedy.tolist()])


def synthetic_random(*args: Any, **kwargs: Any) -> None:
    """``rejection_random_sample_kernel``: vLLM's stand-in, or in synthetic mode the rule for the sampled requests."""
    a = dict(zip(_RANDOM, args, strict=False)) | kwargs
    if not a.get("SYNTHETIC_MODE"):
        replaced_random(*args, **kwargs)
        return
    _synthetic(a, "recovered_token_ids", a["is_greedy"].tolist())


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
    global replaced, replaced_top_k, replaced_greedy, replaced_random
    if cpu_triton_utils._expand_kernel_impl is not expand_to_tokens:
        replaced = cpu_triton_utils._expand_kernel_impl
        cpu_triton_utils._expand_kernel_impl = expand_to_tokens
        log.debug("vLLM CPU: expand_kernel stand-in replaced (float temperatures and top-p reach the draft positions)")
    if topk_topp_sampler.apply_top_k_only is not top_k_of_any_rows:
        replaced_top_k = topk_topp_sampler.apply_top_k_only
        topk_topp_sampler.apply_top_k_only = top_k_of_any_rows
        log.debug("vLLM CPU: apply_top_k_only takes a step without drafts (top-k with n-gram or suffix decoding)")
    if cpu_triton_utils._rejection_greedy_sample_kernel_impl is not synthetic_greedy:
        replaced_greedy = cpu_triton_utils._rejection_greedy_sample_kernel_impl
        replaced_random = cpu_triton_utils._rejection_random_sample_kernel_impl
        cpu_triton_utils._rejection_greedy_sample_kernel_impl = synthetic_greedy
        cpu_triton_utils._rejection_random_sample_kernel_impl = synthetic_random
        log.debug("vLLM CPU: the rejection kernels run synthetic acceptance (spec=simulate)")


def register() -> None:
    """The ``vllm.general_plugins`` entry point."""
    correct_cpu_kernels()
