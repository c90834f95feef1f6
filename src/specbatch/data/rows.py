"""Turning each row of a data set (read by sources.py, local files or the hub) into what the model is asked.

Problems with the data set as a whole (no such file, a missing column, a hub data set that cannot be reached)
raise ConfigError before any model loads. Problems with one row (an empty prompt, a malformed chat) do not: the
row carries an ``error`` and becomes an error row in the output, so one bad row never costs the batch.
"""

from __future__ import annotations

import logging
import random
import re
import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from specbatch.config import ConfigError, DatasetConfig, PromptFormat
from specbatch.data.sources import BAD_LINE, Table, load_table

log = logging.getLogger(__name__)

CHAT_ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class SourceRow:
    """One data set row reduced to what generation needs. A good row has exactly one of text, messages, turns."""

    row_id: str
    category: str | None = None
    # prompt_format=text: the filled template (the user message, or the whole prompt when not chat).
    text: str | None = None
    # prompt_format=messages: the chat to answer, ending with a user message.
    messages: list[dict[str, str]] | None = None
    # prompt_format=turns: the user turns, answered one after another.
    turns: list[str] | None = None
    # Why this row cannot be asked; it then becomes an error row.
    error: str | None = None

    @property
    def num_turns(self) -> int:
        return len(self.turns) if self.turns else 1


def template_fields(template: str) -> list[str]:
    """Column names a ``str.format`` template refers to, in order, without repeats."""
    names: list[str] = []
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ConfigError(
            f"dataset.template is not a valid format string ({exc}): write literal braces as {{{{ and }}}}"
        ) from None
    for _, name, _, _ in parsed:
        if name is None:
            continue
        column = name.split(".")[0].split("[")[0]
        if not column:
            raise ConfigError("dataset.template has an empty {} field: name a column, e.g. {prompt}")
        if "." in re.sub(r"\[[^\]]*\]", "", name):
            # str.format would look the attribute up on the value: {question.upper} sends a bound method's repr,
            # memory address included, as the prompt (and a resume then finds the "data" changed).
            raise ConfigError(
                f"dataset.template field {{{name}}} reads an attribute: only columns and their items are allowed, "
                f"e.g. {{{column}}} or {{{column}[key]}} / {{{column}[0]}}"
            )
        if column not in names:
            names.append(column)
    return names


def required_columns(cfg: DatasetConfig) -> list[tuple[str, str]]:
    """(config key, column) pairs the rows must have."""
    keys: list[tuple[str, str]] = []
    if cfg.prompt_format is PromptFormat.text:
        keys += [("dataset.template", c) for c in template_fields(cfg.template or "")]
    elif cfg.prompt_format is PromptFormat.messages:
        keys.append(("dataset.messages_column", cfg.messages_column))
    else:
        keys.append(("dataset.turns_column", cfg.turns_column))
    for key in ("id_column", "category_column"):
        if getattr(cfg, key):
            keys.append((f"dataset.{key}", getattr(cfg, key)))
    return keys


@dataclass
class RowSource:
    """The rows of a run in order (after shuffle and max_samples), read lazily a span at a time."""

    cfg: DatasetConfig
    table: Table
    # Source positions in run order; a range when not shuffled, so no list of every row is kept.
    order: Sequence[int]

    def __len__(self) -> int:
        return len(self.order)

    def _row_id(self, record: dict[str, Any], index: int) -> str:
        given = record.get(self.cfg.id_column) if self.cfg.id_column else None
        # Generated ids are the row's place in the source, so they survive shuffling and max_samples.
        return str(given) if given is not None else str(index)

    def check_ids(self, span: range) -> None:
        """Refuse duplicate and null ids in these rows up front, before any model loads (only the ids are kept).
        A null id is not replaced by the row's position: that number may be another row's id."""
        if not self.cfg.id_column:
            return
        seen: set[str] = set()
        column = self.cfg.id_column
        for index in (self.order[i] for i in span):
            record = self._record(index)
            if BAD_LINE in record:
                continue  # an unreadable line has no id: it becomes an error row named by its position
            if record.get(column) is None:
                raise ConfigError(
                    f"dataset.id_column={column} is null in row {index + 1} of the data set: give every row an id, "
                    "or set dataset.id_column=null to number the rows by position"
                )
            row_id = self._row_id(record, index)
            if row_id in seen:
                raise ConfigError(f"dataset.id_column={column} is not unique: {row_id!r} appears twice")
            seen.add(row_id)

    def rows(self, span: Sequence[int]) -> list[SourceRow]:
        out = []
        for index in (self.order[i] for i in span):
            record = self._record(index)
            out.append(parse_row(record, self._row_id(record, index), self.cfg))
        return out

    def _record(self, index: int) -> dict[str, Any]:
        """The source row; one whose text is not UTF-8 (a compressed or Parquet file, not checked up front) is an
        error row rather than a traceback in the middle of the run."""
        try:
            return self.table.records[index]
        except UnicodeDecodeError as exc:
            problem = f"byte 0x{exc.object[exc.start]:02x}"
            return {
                BAD_LINE: f"row {index + 1} of {self.cfg.path} is not valid UTF-8 ({problem}): re-save it as UTF-8"
            }


def open_rows(cfg: DatasetConfig, max_samples: int | None) -> RowSource:
    """Open the data set and fix the run's row order; fails naming a missing column or file."""
    table = load_table(cfg)
    columns = table.columns
    missing = [(key, column) for key, column in required_columns(cfg) if column not in columns]
    if missing:
        keys = ", ".join(f"{key}={column}" for key, column in missing)
        where = cfg.path or cfg.hub_id
        raise ConfigError(
            f"{keys}: no such column in {where}; its columns are: {', '.join(columns)}{_format_hint(cfg, columns)}"
        )
    _check_template_columns(cfg, table)
    order: Sequence[int] = range(len(table))
    if cfg.shuffle:
        shuffled = list(order)
        random.Random(cfg.seed).shuffle(shuffled)
        order = shuffled
    if max_samples is not None:
        order = order[:max_samples]
    log.info("dataset %s: %d rows from %s", cfg.name, len(order), cfg.path or cfg.hub_id)
    return RowSource(cfg, table, order)


def _format_hint(cfg: DatasetConfig, columns: list[str]) -> str:
    """With prompt_format=text over rows that hold a chat or turns, the fix is usually the other prompt format."""
    if cfg.prompt_format is not PromptFormat.text:
        return ""
    for fmt, column in (("turns", cfg.turns_column), ("messages", cfg.messages_column)):
        if column in columns:
            return f". The rows hold {column}: to use it, set dataset.prompt_format={fmt} (and dataset.template=null)"
    return ""


def _check_template_columns(cfg: DatasetConfig, table: Table) -> None:
    """A bare {column} over lists or objects would send their Python repr as the prompt: refuse it up front."""
    if cfg.prompt_format is not PromptFormat.text:
        return
    for column in _bare_fields(cfg.template or ""):
        kind = table.nested_kind(column)
        if kind == "list":
            raise ConfigError(
                f"dataset.template={cfg.template} uses column {column}, which holds lists, not text: the prompt "
                f"would be the list's Python repr. For a list of user turns set dataset.prompt_format=turns "
                f"dataset.turns_column={column}, for a chat dataset.prompt_format=messages "
                f"dataset.messages_column={column} (both with dataset.template=null); or pick one item, "
                f"e.g. {{{column}[0]}}"
            )
        if kind == "dict":
            raise ConfigError(
                f"dataset.template={cfg.template} uses column {column}, which holds objects, not text: name a "
                f"field of it in the template, e.g. {{{column}[question]}}"
            )


def _bare_fields(template: str) -> list[str]:
    """Columns the template uses whole (``{turns}``, not ``{turns[0]}``): only those can be a list's repr."""
    return [name for _, name, _, _ in string.Formatter().parse(template) if name and name.isidentifier()]


def load_rows(cfg: DatasetConfig, max_samples: int | None) -> list[SourceRow]:
    """Every row of the run at once (small data sets and tests; the job reads chunk by chunk)."""
    source = open_rows(cfg, max_samples)
    span = range(len(source))
    source.check_ids(span)
    return source.rows(span)


def parse_row(record: dict[str, Any], row_id: str, cfg: DatasetConfig) -> SourceRow:
    if BAD_LINE in record:
        return SourceRow(row_id, error=record[BAD_LINE])
    category = record.get(cfg.category_column) if cfg.category_column else None
    category = None if category is None else str(category)
    try:
        if cfg.prompt_format is PromptFormat.text:
            row = SourceRow(row_id, category, text=_text(record, cfg.template or ""))
        elif cfg.prompt_format is PromptFormat.messages:
            messages = _messages(record.get(cfg.messages_column), cfg.messages_column)
            row = SourceRow(row_id, category, messages=messages)
        else:
            row = SourceRow(row_id, category, turns=_turns(record.get(cfg.turns_column), cfg.turns_column))
        _refuse_placeholder(row, cfg.placeholder_prefix)
    except _BadRow as exc:
        return SourceRow(row_id, category, error=str(exc))
    return row


def _refuse_placeholder(row: SourceRow, prefix: str | None) -> None:
    """A prompt the data set left as a placeholder would be generated from as if it were one (and skew every
    figure of its category): such a row is an error row."""
    if not prefix:
        return
    texts = [row.text or "", *(m["content"] for m in row.messages or []), *(row.turns or [])]
    if any(text.startswith(prefix) for text in texts):
        raise _BadRow(
            f"the prompt is a placeholder ({prefix[:60]!r}...): the data set leaves this row to be filled in from "
            "its source. Prepare the data set with its own script and run that file (docs/datasets.md, SPEED-Bench)"
        )


class _BadRow(ValueError):
    pass


def _text(record: dict[str, Any], template: str) -> str:
    empty = [c for c in template_fields(template) if record.get(c) is None]
    if empty:
        raise _BadRow(f"column(s) {empty} are empty in this row")
    nested = [c for c in _bare_fields(template) if isinstance(record.get(c), (list, dict))]
    if nested:
        raise _BadRow(f"column(s) {nested} hold a list or object in this row, not text: dataset.template needs text")
    try:
        text = template.format(**record)
    except (KeyError, IndexError, AttributeError, ValueError, TypeError) as exc:
        raise _BadRow(f"dataset.template cannot be filled from this row: {type(exc).__name__}: {exc}") from None
    if not text.strip():
        raise _BadRow("empty prompt")
    return text


def _messages(value: Any, column: str) -> list[dict[str, str]]:
    if not isinstance(value, list) or not value:
        raise _BadRow(f"{column} must be a non-empty list of {{role, content}}, got {type(value).__name__}")
    messages = []
    for i, message in enumerate(value):
        if not isinstance(message, dict) or message.get("role") not in CHAT_ROLES:
            raise _BadRow(f"{column}[{i}] needs a role in {CHAT_ROLES}, got {message!r:.80}")
        content = message.get("content")
        if not isinstance(content, str) or not content.strip():
            raise _BadRow(f"{column}[{i}] has an empty or non-text content")
        messages.append({"role": message["role"], "content": content})
    if messages[-1]["role"] != "user":
        raise _BadRow(f"{column} must end with a user message for the model to answer")
    return messages


def _turns(value: Any, column: str) -> list[str]:
    if not isinstance(value, list) or not value:
        raise _BadRow(f"{column} must be a non-empty list of user turns, got {type(value).__name__}")
    for i, turn in enumerate(value):
        if not isinstance(turn, str) or not turn.strip():
            raise _BadRow(f"{column}[{i}] is empty or not text")
    return list(value)
