"""A bare vLLM script: the reference `jobs/bench.py` measures the job's overhead against (not part of the job).

    python jobs/bench_bare.py SPEC.json OUT.json

SPEC.json holds ``llm_kwargs`` (the exact ``vllm.LLM`` arguments the job would use), ``env`` (vLLM's environment
variables), ``prompts`` (token id lists), ``max_tokens`` and ``batch_size`` (1: one prompt per generate call;
0: all prompts in one call). It does what a user's own script would: build the LLM, warm up with the same short
request as the job, generate greedily, and write the token ids and its timings to OUT.json. No Hydra, Parquet or
MLflow, on purpose.
"""

import json
import os
import sys
import time


def main() -> int:
    began = time.perf_counter()
    spec = json.loads(open(sys.argv[1]).read())
    os.environ.update(spec["env"])
    from vllm import LLM, SamplingParams

    start = time.perf_counter()
    llm = LLM(**spec["llm_kwargs"])
    startup = time.perf_counter() - start
    llm.generate([{"prompt_token_ids": [1, 2, 3, 4, 5, 6, 7, 8]}], SamplingParams(max_tokens=8), use_tqdm=False)
    params = SamplingParams(temperature=0.0, max_tokens=spec["max_tokens"])
    prompts = [{"prompt_token_ids": ids} for ids in spec["prompts"]]
    size = spec["batch_size"] or len(prompts)
    outputs = []
    gen_began = time.perf_counter()
    for start_at in range(0, len(prompts), size):
        outputs += llm.generate(prompts[start_at : start_at + size], params, use_tqdm=False)
    generation = time.perf_counter() - gen_began
    tokens = [list(o.outputs[0].token_ids) for o in outputs]
    result = {
        "engine_startup_seconds": startup,
        "generation_seconds": generation,
        "output_tokens": sum(len(t) for t in tokens),
        "token_ids": tokens,
        "script_seconds": time.perf_counter() - began,
    }
    with open(sys.argv[2], "w") as out:
        json.dump(result, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
