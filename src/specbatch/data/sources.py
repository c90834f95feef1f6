"""Finding and reading a data set's source: local files (format, compression, UTF-8 checks, a lenient JSON Lines
reader) or a hub data set, as one Table of records; rows.py turns those records into rows.

A source that cannot be read at all raises ConfigError before any model loads; a JSON Lines line that cannot be read
becomes a record carrying ``BAD_LINE``, which rows.py turns into an error row.
"""

from __future__ import annotations

import codecs
import contextlib
import glob
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specbatch.config import ConfigError, DataFormat, DatasetConfig

log = logging.getLogger(__name__)

_EXTENSIONS = {".jsonl": DataFormat.json, ".json": DataFormat.json, ".csv": DataFormat.csv}
_EXTENSIONS.update({".parquet": DataFormat.parquet, ".pq": DataFormat.parquet})
_COMPRESSION = (".gz", ".bz2", ".xz", ".zst")


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
            "and run with dataset=local dataset.path=data.jsonl (plus the columns, see docs/datasets.md)."
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
