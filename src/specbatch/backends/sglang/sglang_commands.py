"""SGLang's serve commands for a job's set-up (``python -m sglang.launch_server`` and NVIDIA Dynamo's SGLang worker),
and SGLang's table of speculative methods: what has an equivalent is mapped, what has none is refused in one line.

SGLang is a serve-only target: no engine of the job runs on it (a job measures an SGLang server with
engine.backend=server). It serves the job's vLLM set-up, so it reads the vllm backend's engine knobs
(enforce_eager, gpu_memory_utilization, where jobs/serve.py listens).
"""

from __future__ import annotations

from specbatch.backends.vllm import vllm_options
from specbatch.backends.vllm.listen import listen_address
from specbatch.config import ConfigError, JobConfig, SpecMethod

# How our methods map onto SGLang's --speculative-algorithm (python -m sglang.launch_server), from SGLang's
# docs/advanced_features/speculative_decoding.md ("Full Parameter Reference", the MTP example with MiMo, "DFlash
# Decoding") and docs/advanced_features/suffix_decoding.md:
#   eagle -> EAGLE, eagle3 -> EAGLE3 and draft_model -> STANDALONE, with --speculative-draft-model-path spec.model;
#   mtp -> EAGLE without a draft path (the target's own MTP layers, as SGLang's MiMo example; NEXTN is its alias);
#   dflash -> DFLASH with the draft path: one pass per block, so no steps or top-k (SGLang forces both to 1);
#   ngram -> NGRAM (--speculative-ngram-{min,max}-match-window-size from prompt_lookup_min/max; CUDA only);
#   suffix -> SUFFIX (--speculative-suffix-* from the suffix_decoding_* knobs; needs arctic-inference).
# SGLang counts the verified position in --speculative-num-draft-tokens (with topk 1 it is num_steps + 1; for DFLASH
# it is the block: the bonus token and k mask slots, as vLLM's DFlash queries 1 + k), so our k drafted tokens are
# k + 1 there; topk 1 (one chain, one BFS branch for n-gram) is how vLLM drafts.
_SGLANG_ALGORITHMS = {
    SpecMethod.eagle: "EAGLE",
    SpecMethod.eagle3: "EAGLE3",
    SpecMethod.draft_model: "STANDALONE",
    SpecMethod.mtp: "EAGLE",
    SpecMethod.dflash: "DFLASH",
    SpecMethod.ngram: "NGRAM",
    SpecMethod.suffix: "SUFFIX",
}
# Methods whose drafts SGLang takes as one pass of a block: only the size of the block is theirs to set.
_SGLANG_BLOCK_ALGORITHMS = (SpecMethod.dflash, SpecMethod.ngram, SpecMethod.suffix)
_SGLANG_SUFFIX_FLAGS = {
    "suffix_decoding_max_tree_depth": "--speculative-suffix-max-tree-depth",
    "suffix_decoding_max_cached_requests": "--speculative-suffix-max-cached-requests",
    "suffix_decoding_max_spec_factor": "--speculative-suffix-max-spec-factor",
    "suffix_decoding_min_token_prob": "--speculative-suffix-min-token-prob",
}


def _sglang_engine_flags(job: JobConfig) -> list[str]:
    """SGLang's server flags for this job's model, engine and method (the mapping above), without the launcher,
    the model path or where it listens; ConfigError for what SGLang cannot express."""
    model, engine, spec, options = job.model, job.engine, job.spec, vllm_options(job)
    optional = {"--tokenizer-path": model.tokenizer, "--revision": model.revision}
    argv = [part for flag, value in optional.items() if value is not None for part in (flag, value)]
    argv += ["--dtype", model.dtype.value, "--context-length", str(model.max_model_len)]
    argv += ["--tp-size", str(model.tensor_parallel_size), "--random-seed", str(engine.seed)]
    argv += ["--trust-remote-code"] if model.trust_remote_code else []
    # enforce_eager turns off CUDA graphs (SGLang does not torch.compile unless asked).
    argv += ["--disable-cuda-graph"] if options.enforce_eager else []
    if engine.max_num_seqs is not None:
        argv += ["--max-running-requests", str(engine.max_num_seqs)]
    if options.gpu_memory_utilization is not None:
        # The nearest knob: SGLang's share is for weights and KV cache, vLLM's also covers activations.
        argv += ["--mem-fraction-static", str(options.gpu_memory_utilization)]
    if spec.method is SpecMethod.none:
        return argv
    where = f"spec.method={spec.method.value}"
    if spec.method not in _SGLANG_ALGORITHMS:
        # DSpark is the one people expect there: SGLang's DFLASH algorithm runs DFlash drafts, not DSpark's.
        aside = " (its DFLASH runs DFlash drafts, not DSpark's)" if spec.method.value == "dspark" else ""
        raise ConfigError(
            f"{where}: SGLang's speculative decoding docs name no such algorithm{aside}, so it cannot be served the "
            f"same way there; serve it with vLLM (SGLang serves spec={', '.join(m.value for m in _SGLANG_ALGORITHMS)})"
        )
    if spec.draft_sample_method is not None and spec.draft_sample_method.value != "greedy":
        raise ConfigError(
            f"spec.draft_sample_method={spec.draft_sample_method.value}: SGLang's drafters propose their top tokens "
            f"only, so {where} cannot be served the same way there; drop the override to compare with SGLang"
        )
    if spec.rejection_sample_method is not None and spec.rejection_sample_method.value != "standard":
        raise ConfigError(
            f"spec.rejection_sample_method={spec.rejection_sample_method.value}: SGLang verifies drafts token by "
            f"token and has no block verification, so {where} cannot be served the same way there; drop the override "
            "to compare with SGLang"
        )
    if spec.use_heterogeneous_vocab:
        raise ConfigError(
            "spec.use_heterogeneous_vocab=true: SGLang's STANDALONE drafter shares the target's tokenizer, so a draft "
            "with another vocabulary cannot be served the same way there; use a draft of the target's family"
        )
    draft_tp = spec.draft_tensor_parallel_size
    if draft_tp is not None and draft_tp != model.tensor_parallel_size:
        raise ConfigError(
            f"spec.draft_tensor_parallel_size={draft_tp}: SGLang runs the draft on the target's "
            f"{model.tensor_parallel_size} GPU(s) (model.tensor_parallel_size) and has no separate draft "
            "tensor-parallel size; set spec.draft_tensor_parallel_size=null to compare with SGLang"
        )
    if spec.parallel_drafting:
        raise ConfigError(
            "spec.parallel_drafting=true: SGLang's STANDALONE and EAGLE drafters draft one token per pass and have no "
            "parallel-drafting mode, so the same drafter would run differently there; drop spec.parallel_drafting "
            "to compare with SGLang"
        )
    if spec.k_schedule is not None:
        raise ConfigError(
            "spec.k_schedule: SGLang takes one number of draft tokens, not a k per batch size; drop spec.k_schedule "
            "and set spec.num_speculative_tokens to compare with SGLang"
        )
    k = spec.num_speculative_tokens
    assert k is not None  # every method but none has one (SpecConfig checks it)
    argv += ["--speculative-algorithm", _SGLANG_ALGORITHMS[spec.method]]
    if spec.model is not None:
        argv += ["--speculative-draft-model-path", spec.model]
    if spec.revision is not None:
        argv += ["--speculative-draft-model-revision", spec.revision]
    if spec.method in _SGLANG_BLOCK_ALGORITHMS:
        argv += ["--speculative-num-draft-tokens", str(k + 1)]
    else:
        argv += ["--speculative-num-steps", str(k), "--speculative-eagle-topk", "1"]
        argv += ["--speculative-num-draft-tokens", str(k + 1)]
    if spec.method is SpecMethod.ngram:
        argv += ["--speculative-ngram-min-match-window-size", str(spec.prompt_lookup_min)]
        argv += ["--speculative-ngram-max-match-window-size", str(spec.prompt_lookup_max)]
        argv += ["--speculative-ngram-max-bfs-breadth", "1"]
    for knob, flag in _SGLANG_SUFFIX_FLAGS.items():
        if (value := getattr(spec, knob)) is not None:
            argv += [flag, str(value)]
    return argv


def sglang_argv(job: JobConfig) -> list[str]:
    """SGLang's server for this job on ``engine.url``'s host and port; ConfigError for what SGLang cannot express."""
    host, port = listen_address(job)
    argv = [
        "python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        job.model.path,
        "--host",
        host,
        "--port",
        str(port),
    ]
    return argv + _sglang_engine_flags(job)


def dynamo_sglang_argv(job: JobConfig) -> list[str]:
    """NVIDIA Dynamo's SGLang worker for this job, as Dynamo's examples/backends/sglang/launch/agg_spec_decoding.sh
    launches it: SGLang's own flags (its worker parses them with SGLang's ServerArgs), the model served under its
    path, and ``--enable-metrics`` for SGLang's spec-decode counters. HTTP is the frontend's
    (:func:`dynamo_frontend_argv`), so the worker takes no host or port."""
    served = vllm_options(job).served_model or job.model.path
    argv = ["python3", "-m", "dynamo.sglang", "--model-path", job.model.path, "--served-model-name", served]
    return argv + _sglang_engine_flags(job) + ["--enable-metrics"]
