"""The chunk parts, ``data/<shard>/part-<n>.parquet``: one per finished chunk, written under a temporary name and
renamed (the rename is the chunk's commit). Their rows are built by :mod:`specbatch.run.output_rows`; their file is
this module's: the Arrow schema, its version, the write, the reads, and what parts of older versions lack.

Version: the schema's metadata ``specbatch.schema_version`` (``SCHEMA_VERSION``, 5). Rows gain columns from version to
version; a reader of a column an older part lacks reads it as null, except the request's ``seed`` (schema 5), which
older parts had too, only unrecorded: :func:`seed_before_schema_5` derives it as that version did
(:func:`rows_with_seeds` reads rows with it either way). Parts before schema 4 have no prompt token ids (nothing to
replay: :data:`NO_PROMPT_TOKEN_IDS` says so).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from specbatch.common.atomic_files import atomic_write
from specbatch.config import sample_seed, spec_label

# Key of the resolved config in the Parquet file's schema metadata.
CONFIG_METADATA_KEY = b"specbatch.config"
SCHEMA_VERSION_KEY = b"specbatch.schema_version"
SCHEMA_VERSION = b"5"

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
        # Added in schema 5, absent from older parts (seed_before_schema_5 below derives theirs).
        # The seed the sample's request used (config.sample_seed: error rows carry the one their request would have
        # had); null when sampling.seed is null (the engine drew from its own random state).
        pa.field("seed", pa.int64()),
    ]
)


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


# Why a row of a part before output schema 4 cannot be replayed.
NO_PROMPT_TOKEN_IDS = "no prompt token ids (written before output schema 4: generate the run again to replay it)"


def seed_before_schema_5(config: dict[str, Any], row: dict[str, Any]) -> int | None:
    """The seed an output row's request used, for a part written before rows recorded it (output schema 5):
    sample_seed of the set-up that generated the row. That is the run's own (``config``, its run record's), except in
    spec=auto runs, whose phases drew the seeds of the candidate each ran: the row's ``method`` and
    ``num_speculative_tokens`` name it (so their spec=none rows had the spec=none baseline's seeds).

    Parts from before each sample was a request of its own drew every request from sampling.seed itself; speculative
    runs then sampled one completion per prompt (sampling.n > 1 was spec=none's alone), too few for a distribution
    check to pair them, so the derivation does not tell those apart."""
    spec = config["spec"]
    if spec["method"] == "auto":
        setup = spec_label(row["method"], row["num_speculative_tokens"])
    else:
        setup = spec_label(spec["method"], spec["num_speculative_tokens"], spec["k_schedule"])
    return sample_seed(config["sampling"]["seed"], setup, row["row_id"], row["sample_index"])


def read_columns(part: Path, columns: list[str]) -> list[dict[str, Any]]:
    """The rows of ``part`` with ``columns``; a column a part of an older schema lacks reads as null."""
    present = set(pq.read_schema(part).names)
    rows = pq.read_table(part, columns=[c for c in columns if c in present]).to_pylist()
    missing = [c for c in columns if c not in present]
    return [{**dict.fromkeys(missing), **row} for row in rows] if missing else rows


# The columns seed_before_schema_5 reads besides the caller's.
_SEED_COLUMNS = ["row_id", "sample_index", "method", "num_speculative_tokens"]


def rows_with_seeds(part: Path, columns: list[str], config: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The rows of ``part`` (``columns`` of them, and ``seed``), with the seed a part before schema 5 did not record
    derived as that version drew it; ``config`` is the run record's."""
    recorded = "seed" in pq.read_schema(part).names
    wanted = list(dict.fromkeys([*columns, *_SEED_COLUMNS] + ["seed"] * recorded))
    for row in pq.read_table(part, columns=wanted).to_pylist():
        if not recorded:
            row["seed"] = seed_before_schema_5(config, row)
        yield row
