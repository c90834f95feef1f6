"""A bare vLLM script: the reference `jobs/bench.py` measures the job against (not part of the job).

    python jobs/bench_bare.py SPEC.json OUT.json

SPEC.json holds ``llm_kwargs`` (the exact ``vllm.LLM`` arguments the job would use), ``env`` (vLLM's environment
variables), ``prompts`` (token id lists), ``max_tokens`` and ``batch_size`` (1: one prompt per generate call;
0: all prompts in one call). Optionally ``turns``: per prompt, the user turns of a multi-turn row (``prompts`` are
then their first turns). Turn 1 of every row is generated in one call, then turn 2 of every row that has one in
another, each later prompt rendered with the model's chat template from the earlier turns and the model's own
answers, the way a user's script would. It does what a user's own script would: build the LLM, warm up with the
same short request as the job, generate greedily, and write the token ids (turn by turn: every row's turn 1, then
every turn 2, ...) and its timings to OUT.json. No Hydra, Parquet or MLflow, on purpose.
"""

import json
import os
import sys
import time


def render_turn(tokenizer, turns: list[str], answers: list[str]) -> list[int]:
    """Token ids of the next turn: earlier user turns each followed by the model's answer, then the next turn."""
    messages = []
    for user, answer in zip(turns[: len(answers)], answers, strict=True):
        messages += [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]
    messages.append({"role": "user", "content": turns[len(answers)]})
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    # The template wrote the special tokens already.
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def main() -> int:
    began = time.perf_counter()
    spec = json.loads(open(sys.argv[1]).read())
    os.environ.update(spec["env"])
    from vllm import LLM, SamplingParams

    turns = spec.get("turns")
    tokenizer = None
    if turns:
        from transformers import AutoTokenizer

        kwargs = spec["llm_kwargs"]
        tokenizer = AutoTokenizer.from_pretrained(
            kwargs.get("tokenizer", kwargs["model"]), trust_remote_code=kwargs.get("trust_remote_code", False)
        )
    start = time.perf_counter()
    llm = LLM(**spec["llm_kwargs"])
    startup = time.perf_counter() - start
    llm.generate([{"prompt_token_ids": [1, 2, 3, 4, 5, 6, 7, 8]}], SamplingParams(max_tokens=8), use_tqdm=False)
    params = SamplingParams(temperature=0.0, max_tokens=spec["max_tokens"])
    prompts = [{"prompt_token_ids": ids} for ids in spec["prompts"]]
    answers: list[list[str]] = [[] for _ in prompts]
    size = spec["batch_size"] or len(prompts)
    tokens: list[list[int]] = []
    turn_seconds: list[float] = []
    last_turn = max(len(t) for t in turns) if turns else 1
    gen_began = time.perf_counter()
    for turn in range(1, last_turn + 1):
        turn_began = time.perf_counter()
        rows = [i for i in range(len(prompts)) if not turns or len(turns[i]) >= turn]
        if turn > 1:
            asked = [{"prompt_token_ids": render_turn(tokenizer, turns[i], answers[i])} for i in rows]
        else:
            asked = [prompts[i] for i in rows]
        outputs = []
        for start_at in range(0, len(asked), size):
            outputs += llm.generate(asked[start_at : start_at + size], params, use_tqdm=False)
        for i, output in zip(rows, outputs, strict=True):
            answers[i].append(output.outputs[0].text)
            tokens.append(list(output.outputs[0].token_ids))
        turn_seconds.append(time.perf_counter() - turn_began)
    generation = time.perf_counter() - gen_began
    result = {
        "engine_startup_seconds": startup,
        "generation_seconds": generation,
        "turn_seconds": turn_seconds,
        "output_tokens": sum(len(t) for t in tokens),
        "token_ids": tokens,
        "script_seconds": time.perf_counter() - began,
    }
    with open(sys.argv[2], "w") as out:
        json.dump(result, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
