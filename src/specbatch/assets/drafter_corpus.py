"""The embedded drafter-training prompts (``dataset=drafter_train``): 2,436 prompts a learned drafter for the
embedded model is trained on, none of them a prompt of the evaluation sets (``dataset=chat``: MT-Bench's questions;
``dataset=humaneval_edit``: HumanEval's problems).

The kinds, from files installed packages carry (nothing downloaded):

- ``doc2dial``: the first user turn of each Doc2Dial conversation of ChatRAG-Bench, as ``nvidia-lm-eval`` ships it
  (``lm_eval/tasks/chatrag_bench/dataset/nvidia_dragon_multiturn_retrieved.jsonl``; the package is MIT, installed by
  jobs/setup.sh without its dependencies): everyday questions asked of a help desk, answered as chat.
- ``mmlu``: the five worked questions of each of MMLU's 57 subjects from the package's chain-of-thought prompts
  (``lm_eval/tasks/mmlu/flan_cot_fewshot/_cot_prompts.json``), asked to be reasoned step by step.
- ``translation``: every other of those questions, to translate into French, German, Spanish or Italian (the chat
  set's own instruction, on other text).
- ``code``: two in five of the short functions of Python's own standard library (read with ``inspect``), each with
  one of four editing or explaining instructions, one of them the instruction ``dataset=humaneval_edit`` gives.
- ``writing``: every other Doc2Dial source document (the package's ``documents.json``: help pages of four US
  agencies), each with one of eight open tasks in turn, the chat set's kinds of task on other text: a blog post, a
  story, a role played, an explanation (on the page's title), a summary, an email, a list of its figures, questions and
  answers (on its first paragraphs, which the answer copies from). Every other title task is also a ``translation``
  row, as the chat set translates its own questions.

The ``writing`` kind is recipe 2's: a head trained on recipe 1 (help-desk questions, MMLU and code only) drafted the
chat set's open tasks far worse than prompts of the kinds it saw (docs/drafter.md).

Rows are interleaved in proportion to the kinds' sizes, so the first rows of any ``max_samples`` hold every kind in
about the same shares. The file is built once per machine into the cache; its name carries the recipe's version.
"""

from __future__ import annotations

import argparse
import inspect
import json
import logging
import sys
import textwrap
from collections import Counter
from importlib import import_module
from pathlib import Path

from specbatch.assets.cache import EmbeddedAssetError, default_drafter_corpus_file, package_file
from specbatch.assets.chat_data import LANGUAGES, TRANSLATE
from specbatch.common.atomic_files import atomic_write_text

log = logging.getLogger(__name__)

LM_EVAL_PACKAGE = "lm_eval"
DOC2DIAL = "tasks/chatrag_bench/dataset/nvidia_dragon_multiturn_retrieved.jsonl"
DOC2DIAL_DOCUMENTS = "tasks/chatrag_bench/dataset/documents.json"
MMLU_COT = "tasks/mmlu/flan_cot_fewshot/_cot_prompts.json"

# Pure-Python standard-library modules whose functions make the code prompts (a fixed list: the rows do not move
# with what else is importable).
STDLIB_MODULES = (
    "base64", "bisect", "calendar", "colorsys", "csv", "difflib", "email.utils", "fnmatch", "fractions",
    "functools", "glob", "gzip", "heapq", "html", "ipaddress", "json.decoder", "json.encoder", "keyword",
    "mimetypes", "ntpath", "numbers", "operator", "os", "pathlib", "pprint", "posixpath", "quopri", "random",
    "reprlib", "sched", "shlex", "shutil", "statistics", "string", "tarfile", "tempfile", "textwrap", "tokenize",
    "urllib.parse", "uuid", "warnings", "zipfile",
)  # fmt: skip
CODE_INSTRUCTIONS = (
    "Rewrite the following Python function so that there is a short comment above every line of code. Keep the "
    "code itself unchanged and reply with the complete function in one Python code block.",
    "Explain what the following Python function does, step by step.",
    "Add type hints to the following Python function and reply with the complete function in one Python code block.",
    "Write a docstring for the following Python function and reply with the complete function in one Python code "
    "block.",
)
# Functions of this many source lines (comment-every-line answers of longer ones pass 256 tokens).
CODE_LINES = (4, 24)
MMLU_ASK = "{question}\n\nThink step by step, then give the letter of the right answer."

# The agency whose help pages each of documents.json's domains holds (a role to play).
AGENCIES = {
    "dmv": "the Department of Motor Vehicles",
    "ssa": "the Social Security Administration",
    "studentaid": "the Federal Student Aid office",
    "va": "the Department of Veterans Affairs",
}
# Open tasks in turn, on a page's title ({topic}) or on its first paragraphs ({passage}), alternating.
WRITING_TASKS = (
    "Write a short blog post for a general audience about {topic}.",
    "Summarize the following text in three sentences.\n\n{passage}",
    "Pretend you are a helpful clerk at {agency}. A visitor asks you about {topic}. Answer in character.",
    "List every number, date and amount in the text below, each with what it refers to.\n\n{passage}",
    "Explain {topic} to a high-school student in simple words, with one example.",
    "Rewrite the following text as a friendly email to a relative who asked about it.\n\n{passage}",
    "Write a short story of about 150 words in which someone has to deal with {topic}.",
    "Turn the following text into three questions a reader might ask, each with its answer.\n\n{passage}",
)
# A title makes a topic when it has this many words (some first lines are a whole sentence or one word).
TOPIC_WORDS = (2, 12)
# A passage: the page's text after its title, cut at the last full stop before this many characters.
PASSAGE_CHARS = 700


def doc2dial_rows(conversations: list[dict]) -> list[dict[str, str]]:
    """Each conversation's first user turn (its first row has a single message), in the file's order."""
    rows, seen = [], set()
    for number, record in enumerate(conversations):
        messages = record["messages"]
        if len(messages) != 1 or messages[0]["role"] != "user":
            continue
        text = messages[0]["content"].strip()
        if text and text not in seen:
            seen.add(text)
            rows.append({"id": f"doc2dial-{number}", "category": "doc2dial", "prompt": text})
    return rows


def translation_rows(questions: list[dict[str, str]]) -> list[dict[str, str]]:
    """Every other question, to translate (the languages in turn)."""
    rows = []
    for number, question in enumerate(questions[1::2]):
        code, language = LANGUAGES[number % len(LANGUAGES)]
        rows.append(
            {
                "id": f"translate-{code}-{question['id']}",
                "category": "translation",
                "prompt": TRANSLATE.format(language=language, text=question["prompt"]),
            }
        )
    return rows


def mmlu_rows(prompts: dict[str, str]) -> list[dict[str, str]]:
    """The worked questions of each subject's few-shot prompt, without their worked answers."""
    rows = []
    for subject in sorted(prompts):
        blocks = prompts[subject].split("\n\nQ: ")[1:]
        for number, block in enumerate(blocks):
            question = block.split("\nA: ", 1)[0].strip()
            if question:
                rows.append(
                    {
                        "id": f"mmlu-{subject}-{number}",
                        "category": "mmlu",
                        "prompt": MMLU_ASK.format(question=question),
                    }
                )
    return rows


def code_rows() -> list[dict[str, str]]:
    """Two in five short standard-library functions and methods, each with the next of the four instructions."""
    rows = []
    for number, (module_name, name, source) in enumerate(stdlib_functions(STDLIB_MODULES)):
        if not in_corpus(number):
            continue
        instruction = CODE_INSTRUCTIONS[len(rows) % len(CODE_INSTRUCTIONS)]
        rows.append(
            {
                "id": f"code-{module_name}.{name}",
                "category": "code",
                "prompt": f"{instruction}\n\n```python\n{source}```",
            }
        )
    return rows


def in_corpus(number: int) -> bool:
    """Whether the ``number``-th of :func:`stdlib_functions` is a corpus prompt (two in five; the 1,000-row code
    workload of specbatch.assets.workloads takes the others)."""
    return number % 5 in (0, 2)


def stdlib_functions(modules: tuple[str, ...]) -> list[tuple[str, str, str]]:
    """(module, function or Class.method, dedented source) of each short function the modules define, in order."""
    return [(m, name, source) for m in modules for name, source in _functions(import_module(m))]


def _functions(module: object) -> list[tuple[str, str]]:
    found: dict[str, str] = {}
    owners = [("", module)] + [
        (f"{name}.", cls) for name, cls in inspect.getmembers(module, inspect.isclass) if _defined_in(cls, module)
    ]
    for prefix, owner in owners:
        for name, function in inspect.getmembers(owner, inspect.isfunction):
            if not _defined_in(function, module):
                continue
            try:
                source = textwrap.dedent(inspect.getsource(function))
            except (OSError, TypeError):
                continue
            if CODE_LINES[0] <= source.count("\n") <= CODE_LINES[1]:
                found.setdefault(prefix + name, source)
    return sorted(found.items())


def _defined_in(thing: object, module: object) -> bool:
    return getattr(thing, "__module__", None) == getattr(module, "__name__", None)


def writing_rows(documents: dict[str, list[str]]) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """Every other page of each domain with the next open task (a title task falls to the next, a passage task, when
    the page's title is no topic); and every other title task's instruction to translate (the languages in turn)."""
    rows: list[dict[str, str]] = []
    translations: list[dict[str, str]] = []
    titled = 0
    for domain in sorted(documents):
        for number, page in enumerate(documents[domain]):
            if not page_in_corpus(number):
                continue
            title, _, text = page.partition("\n")
            topic, passage = tidy(title).rstrip("."), cut(tidy(text), PASSAGE_CHARS)
            task = WRITING_TASKS[len(rows) % len(WRITING_TASKS)]
            on_title = "{topic}" in task
            if on_title and not _is_topic(topic):
                task, on_title = WRITING_TASKS[(len(rows) + 1) % len(WRITING_TASKS)], False
            if not on_title and not passage:
                continue
            prompt = task.format(topic=f'"{topic}"', passage=passage, agency=AGENCIES.get(domain, "a public office"))
            rows.append({"id": f"writing-{domain}-{number}", "category": "writing", "prompt": prompt})
            if on_title:
                titled += 1
                if titled % 2 == 0:
                    code, language = LANGUAGES[len(translations) % len(LANGUAGES)]
                    translations.append(
                        {
                            "id": f"translate-writing-{code}-{domain}-{number}",
                            "category": "translation",
                            "prompt": TRANSLATE.format(language=language, text=prompt),
                        }
                    )
    return rows, translations


def page_in_corpus(number: int) -> bool:
    """Whether a domain's ``number``-th help page is a writing prompt's (every other; the retrieval workload of
    specbatch.assets.workloads answers from the others)."""
    return number % 2 == 0


def _is_topic(title: str) -> bool:
    """A title that reads as a topic: a few words, not a lead-in to a list (``Do it by mail:``)."""
    return TOPIC_WORDS[0] <= len(title.split()) <= TOPIC_WORDS[1] and title[:1].isupper() and title[-1] != ":"


def tidy(text: str) -> str:
    """One line with the pages' spaces before punctuation taken out (``word , word`` -> ``word, word``)."""
    text = " ".join(text.split())
    for mark in (",", ".", ";", ":", "?", "!", ")"):
        text = text.replace(f" {mark}", mark)
    return text.replace("( ", "(")


def cut(text: str, chars: int) -> str:
    """``text`` up to its last full stop before ``chars`` characters (all of it when shorter; none when no stop)."""
    if len(text) <= chars:
        return text
    stop = text.rfind(". ", 0, chars)
    return text[: stop + 1] if stop > 0 else ""


def interleave(*kinds: list[dict[str, str]]) -> list[dict[str, str]]:
    """Rows of every kind in proportion to the kinds' sizes (row i of a kind of n sits at i/n of the file)."""
    keyed = [((i + 0.5) / len(rows), k, row) for k, rows in enumerate(kinds) for i, row in enumerate(rows)]
    return [row for _, _, row in sorted(keyed, key=lambda item: (item[0], item[1]))]


def corpus_rows() -> list[dict[str, str]]:
    with open(package_file(LM_EVAL_PACKAGE, DOC2DIAL), encoding="utf-8") as f:
        conversations = json.load(f)
    with open(package_file(LM_EVAL_PACKAGE, MMLU_COT), encoding="utf-8") as f:
        cot = json.load(f)
    with open(package_file(LM_EVAL_PACKAGE, DOC2DIAL_DOCUMENTS), encoding="utf-8") as f:
        documents = json.load(f)
    questions = doc2dial_rows(conversations)
    writing, translated_tasks = writing_rows(documents)
    return interleave(questions, translation_rows(questions), mmlu_rows(cot), code_rows(), writing, translated_tasks)


def ensure_drafter_corpus(path: str | Path | None = None) -> Path:
    """Build the prompts into ``path`` (default: the cache's) unless there; written whole or not at all."""
    path = Path(path).expanduser().resolve() if path else default_drafter_corpus_file()
    if path.is_file():
        return path
    rows = corpus_rows()
    if not rows:
        raise EmbeddedAssetError(
            "the drafter-training prompts came out empty: reinstall nvidia-lm-eval with `make setup`"
        )
    atomic_write_text(path, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    kinds = dict(Counter(row["category"] for row in rows))
    log.info("built the drafter-training prompts (%d rows: %s) into %s", len(rows), kinds, path)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the drafter-training prompts (dataset=drafter_train).")
    parser.add_argument("path", nargs="?", default=str(default_drafter_corpus_file()), help="where to write it")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        path = ensure_drafter_corpus(args.path)
    except EmbeddedAssetError as exc:
        log.error("%s", exc)
        return 1
    log.info("drafter-training prompts ready at %s", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
