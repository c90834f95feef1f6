"""The referee on the embedded model: samples the target drew itself (Hugging Face's own sampler, temperature 0.7,
top-p 0.95) are not found to differ; samples drawn 30 % hotter are (tokens outside the asked top-p: 24 tokens a sample
show them, as 48 did at twice the time). The samples of a prompt share the prompt's pass, with the logits of a whole
pass."""

from __future__ import annotations

import pytest
import torch

from conftest import compose_job
from specbatch.analysis.lossless.referee import Referee
from specbatch.analysis.lossless.sampler import Sampler

ASKED = Sampler(0.7, 0, 0.95)
TOKENS = 24
QUESTIONS = [
    "Name three colours.",
    "What is the capital of France?",
    "Write one sentence about the sea.",
    "Count from one to five.",
    "Give me a word that rhymes with cat.",
    "What do bees make?",
    "Say hello in Spanish.",
    "Describe a tree in a few words.",
]


@pytest.fixture(scope="module")
def model_path() -> str:
    return compose_job([]).model.path


@pytest.fixture(scope="module")
def referee(model_path: str) -> Referee:
    return Referee(model_path)


def _samples(referee: Referee, model_path: str, temperature: float) -> list[dict]:
    """Four completions of each question, drawn by transformers' own sampler (temperature, then top-p, as vLLM),
    all questions in one left-padded batch."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path, padding_side="left")
    prompts = [
        tokenizer.encode(
            tokenizer.apply_chat_template(
                [{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False
            ),
            add_special_tokens=False,
        )
        for q in QUESTIONS
    ]
    batch = tokenizer.pad({"input_ids": prompts}, return_tensors="pt")
    torch.manual_seed(0)
    out = referee.model.generate(
        **batch,
        do_sample=True,
        temperature=temperature,
        top_p=ASKED.top_p,
        top_k=0,
        max_new_tokens=TOKENS,
        num_return_sequences=4,
        pad_token_id=tokenizer.eos_token_id,
    )
    rows = []
    for index, ids in enumerate(out[:, batch["input_ids"].shape[1] :].tolist()):
        question = index // 4
        # What an engine returns: the tokens up to and with the first end of sequence.
        end = ids.index(tokenizer.eos_token_id) + 1 if tokenizer.eos_token_id in ids else len(ids)
        rows.append(
            {
                "row_id": QUESTIONS[question],
                "sample_index": index % 4,
                "prompt_token_ids": prompts[question],
                "completion_token_ids": ids[:end],
            }
        )
    return rows


def test_the_targets_own_samples_are_not_found_to_differ_and_hotter_ones_are(
    referee: Referee, model_path: str
) -> None:
    drawn = _samples(referee, model_path, ASKED.temperature)
    own = referee.score(drawn, ASKED).verdict()
    assert own.verdict != "differs", own.why
    assert own.figures["tokens"] > 500 and referee.last is not None and referee.last.seconds > 0
    # Each prompt read once for its four samples, and a sample's logits those of one pass over prompt and sample.
    assert (referee.last.samples, referee.last.prompts) == (32, 8)
    sample = drawn[5]
    whole = torch.tensor([sample["prompt_token_ids"] + sample["completion_token_ids"]])
    with torch.inference_mode():
        expected = referee.model(input_ids=whole).logits[0, len(sample["prompt_token_ids"]) - 1 : -1]
    shared = referee.logits(sample["prompt_token_ids"], sample["completion_token_ids"])
    assert shared.shape == expected.shape and torch.allclose(shared, expected, atol=1e-4, rtol=0)
    hotter = referee.score(_samples(referee, model_path, ASKED.temperature * 1.3), ASKED).verdict()
    assert hotter.verdict == "differs", hotter.why
