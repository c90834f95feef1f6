"""Output rows: one per prompt, with an explicit Arrow schema, written to Parquet atomically."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from specbatch.common.atomic_files import atomic_write
from specbatch.data.prompts import Prompt
from specbatch.engine import Sample

# Key of the resolved config in the Parquet file's schema metadata.
CONFIG_METADATA_KEY = b"specbatch.config"
SCHEMA_VERSION_KEY = b"specbatch.schema_version"
SCHEMA_VERSION = b"5"

STATUS_OK = "ok"
STATUS_ERROR = "error"

SCHEMA = pa.schema(
    [
        pa.field("row_id", pa.string(), nullable=False),
        # 1-based turn of a multi-turn row (dataset.prompt_format=turns); 1 otherwise.
        pa.field("turn", pa.int32(), nullable=False),
        # 0..n-1 when sampling.n > 1; always 0 otherwise.
        pa.field("sample_index", pa.int32(), nullable=False),
        pa.field("category", pa.string()),
        # "ok", or "error" for a row that was not (or could not be) generated; error says why.
        pa.field("status", pa.string(), nullable=False),
        pa.field("error", pa.string()),
        # Null only for a row too malformed to render.
        pa.field("prompt", pa.string()),
        pa.field("completion", pa.string()),
        pa.field("completion_token_ids", pa.list_(pa.int32())),
        pa.field("prompt_tokens", pa.int32()),
        pa.field("completion_tokens", pa.int32()),
        pa.field("finish_reason", pa.string()),
        pa.field("method", pa.string(), nullable=False),
        # Null for spec=none: no speculation is not the same as zero acceptance.
        pa.field("num_speculative_tokens", pa.int32()),
        pa.field("spec_steps", pa.int64()),
        pa.field("draft_tokens", pa.int64()),
        pa.field("accepted_tokens", pa.int64()),
        pa.field("acceptance_length", pa.float64()),
        pa.field("acceptance_histogram", pa.list_(pa.int64())),
        # Added in schema 4, null in older parts. The prompt as the engine got it, and the order in which this
        # launch's engine answered the request (0, 1, ...): what replaying drafting on the run needs
        # (specbatch.prediction; suffix decoding's cache grows in that order).
        pa.field("prompt_token_ids", pa.list_(pa.int32())),
        pa.field("answer_order", pa.int64()),
        # Added in schema 5, absent from older parts (specbatch.run.formats.seed_before_schema_5 derives theirs).
        # The seed the sample's request used (config.sample_seed: error rows carry the one their request would have
        # had); null when sampling.seed is null (the engine drew from its own random state).
        pa.field("seed", pa.int64()),
    ]
)
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


def write_parquet(rows: list[dict[str, Any]], path: Path, config: dict[str, Any]) -> None:
    """Write under a temporary name in the same folder, then rename: a reader sees the whole file or none."""
    atomic_write(path, lambda tmp: write_parquet_file(rows, tmp, config))


def write_parquet_file(rows: list[dict[str, Any]], path: Path, config: dict[str, Any]) -> None:
    """Write ``path`` as it is (not atomic: callers that need to write through common.atomic_files.atomic_write)."""
    schema = SCHEMA.with_metadata(
        {CONFIG_METADATA_KEY: json.dumps(config, sort_keys=True).encode(), SCHEMA_VERSION_KEY: SCHEMA_VERSION}
    )
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)


def read_config_metadata(path: Path) -> dict[str, Any]:
    """The resolved config a Parquet file was written with."""
    metadata = pq.read_schema(path).metadata or {}
    return json.loads(metadata[CONFIG_METADATA_KEY])


def read_rows(paths: list[Path]) -> list[dict[str, Any]]:
    """All rows of a run's Parquet parts, in part order."""
    return [row for path in sorted(paths) for row in pq.read_table(path).to_pylist()]
