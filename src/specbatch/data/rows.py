"""Reading a data set (local files or the hub) and turning each row into what the model is asked.

Problems with the data set as a whole (no such file, a missing column, a hub data set that cannot be reached)
raise ConfigError before any model loads. Problems with one row (an empty prompt, a malformed chat) do not: the
row carries an ``error`` and becomes an error row in the output, so one bad row never costs the batch.
"""

from __future__ import annotations

import codecs
import contextlib
import glob
import json
import logging
import random
import string
from collections.abc import Iterator, Sequence
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
# Bytes read at a time when checking a text file is UTF-8.
_SCAN_BLOCK = 1 << 22
# Rows looked at to tell what a column of a leniently read file holds.
_PEEK_ROWS = 100


@dataclass(frozen=True)
class Table:
    columns: list[str]
    # Indexable rows: a datasets.Dataset, or a list of dicts for leniently read JSON Lines.
    records: Any

    def __len__(self) -> int:
        return len(self.records)

    def nested_kind(self, column: str) -> str | None:
        """'list' or 'dict' when the column holds lists or objects rather than text/numbers, else None."""
        features = getattr(self.records, "features", None)
        if features is None:
            values = [r.get(column) for r in self.records[:_PEEK_ROWS]]
        else:
            import datasets

            feature = features.get(column)
            if isinstance(feature, (datasets.List, datasets.LargeList, datasets.Sequence, list)):
                return "list"
            if isinstance(feature, dict):
                return "dict"
            if isinstance(feature, (datasets.Value, datasets.ClassLabel)):
                return None
            # A free-form column (datasets' Json feature for mixed types): look at its values.
            try:
                values = self.records[:_PEEK_ROWS][column]
            except UnicodeDecodeError:
                return None  # those rows become error rows when read
        values = [v for v in values if v is not None]
        # A column may mix types: refuse up front only when every value looked at is nested.
        if values and all(isinstance(v, list) for v in values):
            return "list"
        if values and all(isinstance(v, dict) for v in values):
            return "dict"
        return None


def load_table(cfg: DatasetConfig) -> Table:
    """The data set's rows; ConfigError when the source cannot be read at all."""
    import datasets

    datasets.disable_progress_bars()
    if cfg.path is not None:
        files = _drop_blank_files(local_files(cfg), cfg)
        fmt = cfg.format or infer_format(files)
        lenient = fmt is DataFormat.json and all(_is_plain_jsonl(f) for f in files)
        # Arrow reads bytes that are not UTF-8 without complaint and fails only when a row is used, deep in the
        # run: look at the text files first, so such a line is an error row (JSON Lines) or a ConfigError.
        for name in files:
            bad = _first_non_utf8_line(name) if _is_plain_text(name) else None
            if bad is None:
                continue
            if lenient:
                return _read_jsonl_leniently(files)
            line, problem = bad
            raise ConfigError(
                f"dataset.path={cfg.path}: {Path(name).name} line {line} is not valid UTF-8 ({problem}): "
                f"{_save_as_utf8(name)}"
            )
        try:
            with _quiet_datasets():
                ds = datasets.load_dataset(fmt.value, data_files=files, split="train")
        except Exception as exc:  # malformed JSON/CSV surfaces as several exception types
            if lenient:
                # Arrow refuses a whole JSON Lines file for one broken line or one odd type; read it line by
                # line instead, so those rows become error rows and the rest still run.
                return _read_jsonl_leniently(files, why=_cause(exc))
            if "corresponds to no data" in str(exc):
                raise ConfigError(f"dataset.path={cfg.path} holds no rows{_NO_ROWS}") from exc
            raise ConfigError(f"cannot read dataset.path={cfg.path} as {fmt.value}: {_cause(exc)}") from exc
        if len(ds) == 0:
            raise ConfigError(f"dataset.path={cfg.path} holds no rows{_NO_ROWS}")
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
    if len(ds) == 0:
        raise ConfigError(f"dataset.hub_id={cfg.hub_id} split {cfg.split} holds no rows: choose another dataset.split")
    return Table(list(ds.column_names), ds)


_NO_ROWS = " (only a header, or an empty list): point dataset.path at a file with rows"


def _drop_blank_files(files: list[str], cfg: DatasetConfig) -> list[str]:
    """Files with nothing in them hold no rows (and make the CSV reader fail): skip them, refuse if all are."""
    blank = [f for f in files if _is_blank(f)]
    if len(blank) == len(files):
        raise ConfigError(f"dataset.path={cfg.path} is empty: point it at a file with rows")
    for name in blank:
        log.warning("skipping %s: the file is empty", name)
    return [f for f in files if f not in blank]


def _is_blank(name: str) -> bool:
    if not _is_plain_text(name):
        return False
    size = Path(name).stat().st_size
    # Only a small file can be all whitespace worth checking; a big one has rows or fails later with its line.
    return size == 0 or (size < 4096 and not Path(name).read_bytes().strip())


def _is_plain_text(name: str) -> bool:
    return Path(name).suffix.lower() in (".jsonl", ".json", ".csv")


def _first_non_utf8_line(name: str) -> tuple[int, str] | None:
    """(1-based line, what is wrong) of the first line of a file that is not UTF-8, or None; constant memory."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    line = 1
    with open(name, "rb") as data:
        while block := data.read(_SCAN_BLOCK):
            try:
                decoder.decode(block)
            except UnicodeDecodeError as exc:
                # exc.object is the decoder's few carried-over bytes (never a newline) plus this block.
                return line + exc.object.count(b"\n", 0, exc.start), f"byte 0x{exc.object[exc.start]:02x}"
            line += block.count(b"\n")
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            return line, "the file ends inside a character"
    return None


def _save_as_utf8(name: str) -> str:
    path = Path(name)
    return f"save it as UTF-8, e.g. iconv -f latin1 -t utf-8 {path.name} > {path.stem}.utf8{path.suffix}"


@contextlib.contextmanager
def _quiet_datasets() -> Iterator[None]:
    """datasets logs its own ERROR (with 0-based row numbers) before raising; we say it once, our way."""
    logger = logging.getLogger("datasets")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def _cause(exc: BaseException) -> str:
    """The innermost exception's message: datasets wraps the useful one in 'An error occurred while generating'."""
    while exc.__cause__ is not None or exc.__context__ is not None:
        exc = exc.__cause__ or exc.__context__
    return f"{type(exc).__name__}: {exc}"


def _is_plain_jsonl(name: str) -> bool:
    return Path(name).suffix.lower() == ".jsonl"


def _read_jsonl_leniently(files: list[str], why: str | None = None) -> Table:
    """Every line on its own: a line that is not UTF-8 or not a JSON object becomes an error row naming its line.

    ``why``: what stopped datasets from reading the files as one table, said when no line is to blame (e.g. a
    column with text in one row and a list in another).
    """
    records: list[dict[str, Any]] = []
    columns: dict[str, None] = {}
    bad: list[str] = []
    for name in files:
        with open(name, "rb") as lines:
            for number, raw in enumerate(lines, 1):
                problem = None
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    line = ""
                    problem = (
                        f"is not valid UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}): "
                        f"{_save_as_utf8(name)}"
                    )
                if not problem and not line.strip():
                    continue
                if not problem:
                    problem, record = _json_object(line)
                if problem:
                    where = f"{Path(name).name} line {number}"
                    record = {BAD_LINE: f"{where} {problem}"}
                    bad.append(where)
                columns.update(dict.fromkeys(k for k in record if k != BAD_LINE))
                records.append(record)
    if bad:
        shown = ", ".join(bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        log.warning("%d line(s) cannot be read and become error rows: %s", len(bad), shown)
    elif why:
        log.warning("datasets could not read %s as one table (%s); read it line by line", ", ".join(files), why)
    return Table(list(columns), records)


def _json_object(line: str) -> tuple[str | None, dict[str, Any]]:
    """(None, the object) or (why the line is not a JSON object, {}); positions are columns of the file's line."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        # json counts lines within this one line (always 1): give only the column, so one line number is said.
        return f"is not a JSON object: {exc.msg} at column {exc.colno}", {}
    except ValueError as exc:
        return f"is not a JSON object: {exc}", {}
    if not isinstance(record, dict):
        return f"is not a JSON object: a JSON {type(record).__name__}", {}
    return None, record


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
            record = self._record(index)
            row_id = self._row_id(record, index)
            if row_id in seen:
                raise ConfigError(f"dataset.id_column={column} is not unique: {row_id!r} appears twice")
            seen.add(row_id)

    def rows(self, span: range) -> list[SourceRow]:
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
