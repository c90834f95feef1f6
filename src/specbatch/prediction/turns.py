"""The token ids of a finished run, as the replay reads them: one ReplayTurn per answered (row, turn, sample), and
the rows it cannot replay, each with why."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from specbatch.run.folder import read_run, shard_folders
from specbatch.run.output_rows import STATUS_OK
from specbatch.run.records.output_parts import NO_PROMPT_TOKEN_IDS, read_columns

_COLUMNS = [
    "row_id",
    "turn",
    "sample_index",
    "category",
    "status",
    "completion_token_ids",
    "prompt_token_ids",
    "answer_order",
    "finish_reason",
]


@dataclass(frozen=True)
class ReplayTurn:
    """One completion of the run, with the prompt the engine got for it."""

    row_id: str
    turn: int
    sample_index: int
    category: str | None
    prompt: np.ndarray
    completion: np.ndarray
    # Where the job asked for it: (shard, part, place in the part), rows in the order the job submits them.
    position: tuple[int, int, int]
    # When its shard's engine answered it: (shard, part, answer_order); the parts of a resumed shard come from
    # different launches, each counting from 0.
    answered: tuple[int, int, int]
    # Why the engine stopped it: "length" (max_tokens: it would have gone on) or "stop" (a stop token).
    finish_reason: str | None = None

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.row_id, self.turn, self.sample_index)

    def context(self) -> np.ndarray:
        """Prompt and completion in one int32 array, as the engine's token buffer holds them."""
        return np.concatenate([self.prompt, self.completion]).astype(np.int32)


@dataclass
class RunTurns:
    """What a run gives the replay: its config, its turns, and the rows left out with why."""

    root: Path
    config: dict[str, Any]
    turns: list[ReplayTurn] = field(default_factory=list)
    # (row_id, turn, why) of each row that is not replayed: error rows, rows without token ids.
    skipped: list[tuple[str, int, str]] = field(default_factory=list)
    # Requests each shard's engine ran at once (its summary's concurrency; None where unknown).
    concurrency: dict[int, int | None] = field(default_factory=dict)


class NoTokenIds(ValueError):
    """The run kept no token ids to replay (parts of an older output schema, specbatch.run.records.output_parts, or
    an engine that returns none)."""


def read_turns(root: Path) -> RunTurns:
    """Every answered turn of the run at ``root`` (merged or not: every shard's parts)."""
    root = Path(root).resolve()
    run = RunTurns(root, read_run(root)["config"])
    for shard_number, folder in enumerate(shard_folders(root)):
        run.concurrency[shard_number] = folder.read_summary().concurrency if folder.stats_path.is_file() else None
        read_parts(folder.parts(), run, shard_number)
    if not run.turns:
        reasons = sorted({why for _, _, why in run.skipped}) or ["it has no rows"]
        raise NoTokenIds(f"{root} has nothing to replay: {'; '.join(reasons)}")
    return run


def read_parts(parts: list[Path], run: RunTurns, shard_number: int = 0) -> None:
    """The answered turns of ``parts`` (one shard's, in chunk order) into ``run``, the others into its skipped."""
    for part_number, part in enumerate(parts):
        for place, row in enumerate(read_columns(part, _COLUMNS)):
            why = _not_replayable(row)
            if why:
                run.skipped.append((row["row_id"], row["turn"], why))
                continue
            run.turns.append(
                ReplayTurn(
                    row_id=row["row_id"],
                    turn=row["turn"],
                    sample_index=row["sample_index"],
                    category=row["category"],
                    prompt=np.asarray(row["prompt_token_ids"], dtype=np.int32),
                    completion=np.asarray(row["completion_token_ids"], dtype=np.int32),
                    position=(shard_number, part_number, place),
                    answered=(shard_number, part_number, row["answer_order"] or 0),
                    finish_reason=row["finish_reason"],
                )
            )


def _not_replayable(row: dict[str, Any]) -> str | None:
    if row["status"] != STATUS_OK:
        return "error row"
    if row["prompt_token_ids"] is None:
        return NO_PROMPT_TOKEN_IDS
    if not row["completion_token_ids"]:
        return "no completion token ids (the engine returned none)"
    return None
