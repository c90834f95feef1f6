"""The 1,000-row workloads (dataset=helpdesk, retrieval, code_edit): built from the installed packages, held out from
the drafter-training prompts and from each other, and what their presets read."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from conftest import PROJECT_ROOT
from specbatch.assets.cache import WORKLOADS_FOLDER
from specbatch.assets.drafter_corpus import corpus_rows
from specbatch.assets.workloads import (
    EDIT,
    PAGE_CHARS,
    ROWS,
    WORKLOADS,
    conversation_rows,
    ensure_workloads,
    spread,
    workload_rows,
)
from specbatch.common.errors import ConfigError
from specbatch.config.compose import compose_job
from specbatch.data.rows import open_rows

AGENCIES = {"dmv", "ssa", "studentaid", "va"}


@pytest.fixture(scope="module")
def built() -> dict[str, list]:
    return workload_rows()


def test_each_workload_is_a_thousand_rows_with_unique_ids_the_same_on_every_build(built: dict[str, list]) -> None:
    assert {name: len(rows) for name, rows in built.items()} == dict.fromkeys(WORKLOADS, ROWS)
    for rows in built.values():
        assert len({row["id"] for row in rows}) == ROWS
    assert set(Counter(row["category"] for row in built["helpdesk"])) == AGENCIES
    assert set(Counter(row["category"] for row in built["retrieval"])) == AGENCIES
    assert Counter(row["category"] for row in built["code_edit"]) == {"humaneval": 164, "stdlib": 836}
    assert workload_rows() == built


def test_no_prompt_is_a_drafter_training_prompt_and_no_turn_is_in_both_chats(built: dict[str, list]) -> None:
    rows = corpus_rows()
    corpus = [row["prompt"] for row in rows]
    code = [prompt.split("```python\n", 1)[1] for prompt in corpus if "```python\n" in prompt]
    edits = [row["prompt"].split("```python\n", 1)[1] for row in built["code_edit"]]
    assert len(code) > 400 and not set(edits) & set(code)
    last_turns = {row["messages"][-1]["content"] for name in ("helpdesk", "retrieval") for row in built[name]}
    multi_turn = [r for name in ("helpdesk", "retrieval") for r in built[name] if len(r["messages"]) > 2]
    assert len(multi_turn) == 2 * ROWS  # every one a later turn: a first turn is a corpus prompt
    assert not {row["id"].split("-")[1] for row in built["helpdesk"]} & {
        row["id"].split("-")[1] for row in built["retrieval"]
    }
    assert len(last_turns) > ROWS  # real conversations, not one question repeated
    writing_pages = {row["id"].removeprefix("writing-") for row in rows if row["category"] == "writing"}
    assert writing_pages and not {row["page"] for row in built["retrieval"]} & writing_pages


def test_a_retrieval_row_answers_from_its_first_ranked_page_which_the_drafter_never_saw() -> None:
    """Retrieval takes the later turns whose first-ranked page is one the drafter corpus does not write on (odd
    pages), its text cut at a sentence; help-desk chat takes the other later turns; first turns neither."""
    long_page = "Renewing a license \n" + "You can renew online . " * 200
    records = [
        {"document": "dmv", "ctxs": [1, 0], "messages": [{"role": "user", "content": f"q{n}"}]} for n in range(2)
    ]
    records += [
        {
            "document": "dmv",
            "ctxs": [1, 0] if i % 2 == 0 else [0, 1],  # page 1 first (held out), or page 0 (a corpus page)
            "messages": [
                {"role": "user", "content": "How do I renew?"},
                {"role": "assistant", "content": "Online or by mail."},
                {"role": "user", "content": f"And  online {i}?"},
            ],
        }
        for i in range(6)
    ]
    rows = conversation_rows(records, {"dmv": ["Other page \nNo.", long_page]}, rows=2)
    assert [row["id"] for row in rows["retrieval"]] == ["retrieval-2", "retrieval-4"]
    assert [row["page"] for row in rows["retrieval"]] == ["dmv-1", "dmv-1"]
    assert [row["id"] for row in rows["helpdesk"]] == ["helpdesk-3", "helpdesk-6"]
    system, *conversation = rows["retrieval"][0]["messages"]
    assert system["role"] == "system" and "Department of Motor Vehicles" in system["content"]
    page = system["content"].split("Help page:\n", 1)[1]
    assert page.startswith("Renewing a license You can renew online.") and page.endswith(".")
    assert len(page) <= PAGE_CHARS
    assert conversation[-1] == {"role": "user", "content": "And online 0?"}  # spaces tidied
    assert rows["helpdesk"][0]["messages"] == conversation[:-1] + [{"role": "user", "content": "And online 1?"}]
    assert spread(list(range(10)), 4) == [0, 2, 5, 7] and spread([1, 2], 4) == [1, 2]


def test_the_presets_read_the_built_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECBATCH_CACHE", str(tmp_path))
    with pytest.raises(ConfigError, match=r"dataset=helpdesk reads .*is missing: run `make setup`"):
        compose_job(["dataset=helpdesk"])  # before any model loads
    folder = ensure_workloads()
    assert folder == tmp_path / "data" / WORKLOADS_FOLDER
    for name in WORKLOADS:
        source = open_rows(compose_job([f"dataset={name}", "max_samples=null"]).dataset, None)
        assert len(source) == ROWS
    first = json.loads((folder / "code_edit.jsonl").read_text().splitlines()[0])
    assert first["prompt"].startswith(EDIT)
    stamp = (folder / "helpdesk.jsonl").stat().st_mtime_ns
    assert ensure_workloads() == folder and (folder / "helpdesk.jsonl").stat().st_mtime_ns == stamp


def test_set_up_builds_the_folder_the_presets_read() -> None:
    setup = (PROJECT_ROOT / "jobs" / "setup.sh").read_text()
    assert f'WORKLOADS="$CACHE/data/{WORKLOADS_FOLDER}"' in setup
    assert '-m specbatch.assets.workloads "$WORKLOADS"' in setup
