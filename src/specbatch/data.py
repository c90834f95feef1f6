"""Reading a data set (local files or the hub) and turning each row into what the model is asked.

Problems with the data set as a whole (no such file, a missing column, a hub data set that cannot be reached)
raise ConfigError before any model loads. Problems with one row (an empty prompt, a malformed chat) do not: the
row carries an ``error`` and becomes an error row in the output, so one bad row never costs the batch.
"""

from __future__ import annotations

import glob
import json
import logging
import random
import string
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specbatch.config import ConfigError, DataFormat, DatasetConfig, PromptFormat

log = logging.getLogger(__name__)

CHAT_ROLES = ("system", "user", "assistant")
_EXTENSIONS = {".jsonl": DataFormat.json, ".json": DataFormat.json, ".csv": DataFormat.csv}
_EXTENSIONS.update({".parquet": DataFormat.parquet, ".pq": DataFormat.parquet})
_COMPRESSION = (".gz", ".bz2", ".xz", ".zst")


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


def local_files(cfg: DatasetConfig) -> list[str]:
    pattern = str(Path(cfg.path or "").expanduser())
    files = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
    files = [f for f in files if Path(f).is_file()]
    if not files:
        raise ConfigError(
            f"dataset.path={cfg.path} matches no file: point it at a .jsonl, .json, .csv or .parquet file (or a glob)"
        )
    return files


def infer_format(files: list[str]) -> DataFormat:
    formats = set()
    for name in files:
        suffixes = [s for s in Path(name).suffixes if s not in _COMPRESSION]
        fmt = _EXTENSIONS.get(suffixes[-1].lower()) if suffixes else None
        if fmt is None:
            raise ConfigError(f"cannot tell the format of {name} from its name: set dataset.format=json|csv|parquet")
        formats.add(fmt)
    if len(formats) > 1:
        raise ConfigError(f"dataset.path mixes formats {sorted(formats)}: use files of one format")
    return formats.pop()


# Key a leniently read JSON line gets when it is not valid JSON (it becomes an error row).
BAD_LINE = "__specbatch_bad_line__"


@dataclass(frozen=True)
class Table:
    columns: list[str]
    # Indexable rows: a datasets.Dataset, or a list of dicts for leniently read JSON Lines.
    records: Any

    def __len__(self) -> int:
        return len(self.records)


def load_table(cfg: DatasetConfig) -> Table:
    """The data set's rows; ConfigError when the source cannot be read at all."""
    import datasets

    datasets.disable_progress_bars()
    if cfg.path is not None:
        files = local_files(cfg)
        fmt = cfg.format or infer_format(files)
        try:
            ds = datasets.load_dataset(fmt.value, data_files=files, split="train")
        except Exception as exc:  # malformed JSON/CSV surfaces as several exception types
            if fmt is DataFormat.json and all(_is_plain_jsonl(f) for f in files):
                # Arrow refuses a whole JSON Lines file for one broken line or one odd type; read it line by
                # line instead, so those rows become error rows and the rest still run.
                log.warning("datasets could not read %s (%s); reading it line by line", cfg.path, exc)
                return _read_jsonl_leniently(files)
            raise ConfigError(f"cannot read dataset.path={cfg.path} as {fmt.value}: {exc}") from exc
        return Table(list(ds.column_names), ds)
    try:
        ds = datasets.load_dataset(cfg.hub_id, cfg.hub_config, split=cfg.split, revision=cfg.revision)
    except Exception as exc:  # offline, unknown id, gated, wrong split: one message that says what to do
        raise ConfigError(
            f"dataset.hub_id={cfg.hub_id} (config {cfg.hub_config}, split {cfg.split}) could not be loaded: "
            f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}. If this machine is offline the "
            "data set is not available here: save it where there is network, e.g. "
            f"datasets.load_dataset({cfg.hub_id!r}, {cfg.hub_config!r}, split={cfg.split!r}).to_json('data.jsonl'), "
            "and run with dataset=local dataset.path=data.jsonl (plus the columns, see README)."
        ) from exc
    return Table(list(ds.column_names), ds)


def _is_plain_jsonl(name: str) -> bool:
    return Path(name).suffix.lower() == ".jsonl"


def _read_jsonl_leniently(files: list[str]) -> Table:
    records: list[dict[str, Any]] = []
    columns: dict[str, None] = {}
    for name in files:
        with open(name, encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                    if not isinstance(record, dict):
                        raise ValueError(f"a JSON {type(record).__name__}, not an object")
                except ValueError as exc:
                    record = {BAD_LINE: f"{Path(name).name} line {number} is not a JSON object: {exc}"}
                columns.update(dict.fromkeys(k for k in record if k != BAD_LINE))
                records.append(record)
    return Table(list(columns), records)


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

    def check_unique_ids(self, span: range) -> None:
        """Refuse duplicate ids in these rows up front, before any model loads (only the ids are kept)."""
        if not self.cfg.id_column:
            return
        seen: set[str] = set()
        column = self.cfg.id_column
        for index in (self.order[i] for i in span):
            record = self.table.records[index]
            row_id = self._row_id(record, index)
            if row_id in seen:
                raise ConfigError(f"dataset.id_column={column} is not unique: {row_id!r} appears twice")
            seen.add(row_id)

    def rows(self, span: range) -> list[SourceRow]:
        out = []
        for index in (self.order[i] for i in span):
            record = self.table.records[index]
            out.append(parse_row(record, self._row_id(record, index), self.cfg))
        return out


def open_rows(cfg: DatasetConfig, max_samples: int | None) -> RowSource:
    """Open the data set and fix the run's row order; fails naming a missing column or file."""
    table = load_table(cfg)
    columns = table.columns
    missing = [(key, column) for key, column in required_columns(cfg) if column not in columns]
    if missing:
        keys = ", ".join(f"{key}={column}" for key, column in missing)
        where = cfg.path or cfg.hub_id
        raise ConfigError(f"{keys}: no such column in {where}; its columns are: {', '.join(columns)}")
    order: Sequence[int] = range(len(table))
    if cfg.shuffle:
        shuffled = list(order)
        random.Random(cfg.seed).shuffle(shuffled)
        order = shuffled
    if max_samples is not None:
        order = order[:max_samples]
    log.info("dataset %s: %d rows from %s", cfg.name, len(order), cfg.path or cfg.hub_id)
    return RowSource(cfg, table, order)


def load_rows(cfg: DatasetConfig, max_samples: int | None) -> list[SourceRow]:
    """Every row of the run at once (small data sets and tests; the job reads chunk by chunk)."""
    source = open_rows(cfg, max_samples)
    span = range(len(source))
    source.check_unique_ids(span)
    return source.rows(span)


def parse_row(record: dict[str, Any], row_id: str, cfg: DatasetConfig) -> SourceRow:
    if BAD_LINE in record:
        return SourceRow(row_id, error=record[BAD_LINE])
    category = record.get(cfg.category_column) if cfg.category_column else None
    category = None if category is None else str(category)
    try:
        if cfg.prompt_format is PromptFormat.text:
            return SourceRow(row_id, category, text=_text(record, cfg.template or ""))
        if cfg.prompt_format is PromptFormat.messages:
            messages = _messages(record.get(cfg.messages_column), cfg.messages_column)
            return SourceRow(row_id, category, messages=messages)
        return SourceRow(row_id, category, turns=_turns(record.get(cfg.turns_column), cfg.turns_column))
    except _BadRow as exc:
        return SourceRow(row_id, category, error=str(exc))


class _BadRow(ValueError):
    pass


def _text(record: dict[str, Any], template: str) -> str:
    empty = [c for c in template_fields(template) if record.get(c) is None]
    if empty:
        raise _BadRow(f"column(s) {empty} are empty in this row")
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
