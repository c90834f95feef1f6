"""Output rows: one per sample of a prompt's turn, as the engine answered it or as an error row that keeps its place.

Their columns and the Parquet parts they are written into (schema, version, read, write, and what parts of older
versions lack) belong to :mod:`specbatch.run.records.output_parts`.
"""

from __future__ import annotations

from typing import Any

from specbatch.data.prompts import Prompt
from specbatch.engine import Sample

# A row's status: generated, or not (its error says why).
STATUS_OK = "ok"
STATUS_ERROR = "error"

_EMPTY_OUTPUT = dict.fromkeys(
    ["completion", "completion_token_ids", "completion_tokens", "finish_reason"]
    + ["spec_steps", "draft_tokens", "accepted_tokens", "acceptance_length", "acceptance_histogram"]
)


def build_output_rows(
    prompt: Prompt,
    samples: list[Sample],
    method: str,
    k: int | None,
    answer_order: int | None = None,
    first_sample: int = 0,
    seed: int | None = None,
) -> list[dict[str, Any]]:
    """Output rows from a prompt and the engine's samples for it: one per completion, numbered from
    ``first_sample`` (the request's sample index); ``answer_order``: how many requests the engine had answered
    before this one in this launch; ``seed``: the request's."""
    rows = []
    for index, completion in enumerate(samples, start=first_sample):
        figures = completion.spec if k is not None else None
        rows.append(
            {
                "row_id": prompt.row_id,
                "turn": prompt.turn,
                "sample_index": index,
                "category": prompt.category,
                "status": STATUS_OK,
                "error": None,
                "prompt": prompt.text,
                "completion": completion.text,
                "completion_token_ids": list(completion.token_ids),
                "prompt_tokens": len(prompt.token_ids),
                "completion_tokens": len(completion.token_ids),
                "finish_reason": completion.finish_reason,
                "method": method,
                "num_speculative_tokens": k,
                "spec_steps": figures.spec_steps if figures else None,
                "draft_tokens": figures.draft_tokens if figures else None,
                "accepted_tokens": figures.accepted_tokens if figures else None,
                "acceptance_length": figures.acceptance_length if figures else None,
                "acceptance_histogram": figures.acceptance_histogram if figures else None,
                "prompt_token_ids": list(prompt.token_ids),
                "answer_order": answer_order,
                "seed": seed,
            }
        )
    return rows


def error_output_row(
    row_id: str,
    turn: int,
    category: str | None,
    message: str,
    method: str,
    k: int | None,
    prompt: Prompt | None = None,
    sample: int = 0,
    seed: int | None = None,
) -> dict[str, Any]:
    """A row (one sample of one turn) that was not generated, with why; it keeps its place in the output so
    nothing goes missing."""
    return {
        "row_id": row_id,
        "turn": turn,
        "sample_index": sample,
        "category": category,
        "status": STATUS_ERROR,
        "error": message,
        "prompt": prompt.text if prompt else None,
        "prompt_tokens": len(prompt.token_ids) if prompt else None,
        "method": method,
        "num_speculative_tokens": k,
        **_EMPTY_OUTPUT,
        "prompt_token_ids": None,
        "answer_order": None,
        "seed": seed,
    }
