"""Reading a data set's rows and turning each into the text of a prompt (before any tokenizer or model)."""

from __future__ import annotations

import logging
import string
from dataclasses import dataclass
from pathlib import Path

from specbatch.config import ConfigError, DatasetConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SourceRow:
    """One data set row reduced to what generation needs."""

    row_id: str
    # The dataset template filled with the row's columns: the user message (chat) or the whole prompt (plain).
    text: str


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


def load_rows(cfg: DatasetConfig, max_samples: int | None) -> list[SourceRow]:
    """Read the first ``max_samples`` rows and fill the template; fails naming the missing column or file."""
    import datasets

    path = Path(cfg.path).expanduser()
    if not path.is_file():
        raise ConfigError(f"dataset.path={cfg.path} does not exist: point dataset.path at a {cfg.format.value} file")
    datasets.disable_progress_bars()
    try:
        table = datasets.load_dataset(cfg.format.value, data_files=str(path), split=cfg.split)
    except ValueError as exc:
        raise ConfigError(f"cannot read dataset.path={cfg.path} as dataset.split={cfg.split!r}: {exc}") from exc
    columns = list(table.column_names)
    wanted = template_fields(cfg.template) + ([cfg.id_column] if cfg.id_column else [])
    missing = [c for c in wanted if c not in columns]
    if missing:
        key = "dataset.id_column" if missing == [cfg.id_column] else "dataset.template"
        raise ConfigError(
            f"{key} refers to column(s) {missing} that {cfg.path} does not have; its columns are: {', '.join(columns)}"
        )
    if max_samples is not None:
        table = table.select(range(min(max_samples, len(table))))
    rows: list[SourceRow] = []
    seen: set[str] = set()
    for index, record in enumerate(table):
        row_id = str(record[cfg.id_column]) if cfg.id_column else str(index)
        if row_id in seen:
            raise ConfigError(f"dataset.id_column={cfg.id_column} is not unique: {row_id!r} appears twice")
        seen.add(row_id)
        rows.append(SourceRow(row_id=row_id, text=cfg.template.format(**record)))
    log.info("dataset %s: %d rows from %s", cfg.name, len(rows), path)
    return rows
