"""Rows from local files of every format and from the packaged HumanEval; bad data sets fail before any model,
bad rows become error rows."""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import run_generate
from specbatch.config import ConfigError
from specbatch.data import sources as data_module
from specbatch.data.prompts import (
    Prompt,
    conversation,
    length_error,
    load_tokenizer,
    longest_token_chars,
    oversized_error,
    render,
)
from specbatch.data.rows import SourceRow, load_rows, template_fields

ROWS = [
    {"id": "a", "question": "What is 2+2?", "topic": "math"},
    {"id": "b", "question": "Name a colour.", "topic": "general"},
    {"id": "c", "question": "What is 3*3?", "topic": "math"},
]


def write(path: Path, rows: list[dict]) -> str:
    """Write rows in the format the file name says."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif path.suffix == ".json":
        path.write_text(json.dumps(rows))
    elif path.suffix == ".csv":
        cols = list(rows[0])
        path.write_text(",".join(cols) + "\n" + "".join(",".join(str(r[c]) for c in cols) + "\n" for r in rows))
    else:
        pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


def local(job_factory, path: str, *extra: str):
    return job_factory("dataset=local", f"dataset.path={path}", *extra).dataset


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".csv", ".parquet"])
def test_every_local_format_reads_the_same_rows(job_factory, tmp_path: Path, suffix: str) -> None:
    path = write(tmp_path / f"data{suffix}", ROWS)
    cfg = local(
        job_factory, path, "dataset.template='Q: {question}'", "dataset.id_column=id", "dataset.category_column=topic"
    )
    rows = load_rows(cfg, None)
    assert [(r.row_id, r.category, r.text) for r in rows] == [
        ("a", "math", "Q: What is 2+2?"),
        ("b", "general", "Q: Name a colour."),
        ("c", "math", "Q: What is 3*3?"),
    ]


def test_a_glob_reads_every_file_and_ids_are_generated_in_source_order(job_factory, tmp_path: Path) -> None:
    write(tmp_path / "d" / "part1.jsonl", ROWS[:2])
    write(tmp_path / "d" / "part2.jsonl", ROWS[2:])
    rows = load_rows(local(job_factory, f"{tmp_path}/d/*.jsonl", "dataset.template='{question}'"), None)
    assert [r.row_id for r in rows] == ["0", "1", "2"] and rows[2].text == "What is 3*3?"


def test_shuffle_is_seeded_and_keeps_source_ids(job_factory, tmp_path: Path) -> None:
    path = write(tmp_path / "d.jsonl", [{"question": f"q{i}"} for i in range(20)])
    args = ("dataset.template='{question}'", "dataset.shuffle=true", "dataset.seed=7")
    first = load_rows(local(job_factory, path, *args), 5)
    again = load_rows(local(job_factory, path, *args), 5)
    assert [r.row_id for r in first] == [r.row_id for r in again] != ["0", "1", "2", "3", "4"]
    assert all(r.text == f"q{r.row_id}" for r in first)


def test_humaneval_edit_rows(job_factory) -> None:
    job = job_factory("max_samples=3")
    rows = load_rows(job.dataset, job.max_samples)
    assert [r.row_id for r in rows] == ["HumanEval/0", "HumanEval/1", "HumanEval/2"]
    assert "def has_close_elements" in rows[0].text and "comment above every line" in rows[0].text
    # The full solution is in the prompt: the answer can copy it, which is what n-gram drafting feeds on.
    assert "return False" in rows[0].text


def test_humaneval_completion_is_plain_text(job_factory) -> None:
    job = job_factory("dataset=humaneval", "max_samples=1")
    [row] = load_rows(job.dataset, job.max_samples)
    prompt = render(row, 1, [], job.dataset, load_tokenizer(job.model))
    assert prompt.text == row.text and prompt.text.startswith("from typing import List")
    assert "<|im_start|>" not in prompt.text


def test_chat_prompts_use_the_chat_template_and_system_prompt(job_factory) -> None:
    job = job_factory("max_samples=1", "dataset.system_prompt=You edit code.")
    tokenizer = load_tokenizer(job.model)
    [row] = load_rows(job.dataset, 1)
    prompt = render(row, 1, [], job.dataset, tokenizer)
    assert prompt.text.startswith("<|im_start|>system\nYou edit code.<|im_end|>\n<|im_start|>user\n")
    assert prompt.text.endswith("<|im_start|>assistant\n")
    assert tokenizer.decode(prompt.token_ids) == prompt.text


def test_messages_and_turns_rows(job_factory, tmp_path: Path) -> None:
    chats = [{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]}]
    rows = load_rows(local(job_factory, write(tmp_path / "m.jsonl", chats), "dataset.prompt_format=messages"), None)
    assert rows[0].messages == chats[0]["messages"] and rows[0].error is None
    multi = [{"turns": ["First?", "Second?", "Third?"]}]
    cfg = local(
        job_factory, write(tmp_path / "t.jsonl", multi), "dataset.prompt_format=turns", "dataset.system_prompt=S"
    )
    [row] = load_rows(cfg, None)
    assert row.num_turns == 3
    assert conversation(row, 3, ["A1", "A2"], cfg) == [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "First?"},
        {"role": "assistant", "content": "A1"},
        {"role": "user", "content": "Second?"},
        {"role": "assistant", "content": "A2"},
        {"role": "user", "content": "Third?"},
    ]


def test_bad_rows_become_error_rows_not_failures(job_factory, tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    lines = [
        json.dumps({"id": "ok", "turns": ["fine"]}),
        json.dumps({"id": "empty-list", "turns": []}),
        json.dumps({"id": "blank-turn", "turns": ["fine", "  "]}),
        json.dumps({"id": "not-a-list", "turns": "just a string"}),
        "{this is not json",
        json.dumps({"id": "ok2", "turns": ["also fine", "twice"]}),
    ]
    path.write_text("\n".join(lines) + "\n")
    rows = load_rows(local(job_factory, str(path), "dataset.prompt_format=turns", "dataset.id_column=id"), None)
    errors = {r.row_id: r.error for r in rows}
    assert errors["ok"] is None and errors["ok2"] is None
    assert "must be a non-empty list" in errors["empty-list"]
    assert "turns[1] is empty" in errors["blank-turn"]
    assert "got str" in errors["not-a-list"]
    assert "bad.jsonl line 5 is not a JSON object" in errors["4"]


def test_empty_text_and_bad_messages_are_row_errors(job_factory, tmp_path: Path) -> None:
    path = write(tmp_path / "e.jsonl", [{"q": "fine"}, {"q": "   "}, {"q": None}])
    errors = [r.error for r in load_rows(local(job_factory, path, "dataset.template='{q}'"), None)]
    assert errors[0] is None and errors[1] == "empty prompt" and "['q'] are empty" in errors[2]
    chats = [{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}]
    path = write(tmp_path / "m.jsonl", chats + [{"messages": [{"role": "robot", "content": "x"}]}])
    errors = [r.error for r in load_rows(local(job_factory, path, "dataset.prompt_format=messages"), None)]
    assert "must end with a user message" in errors[0] and "needs a role in" in errors[1]


def test_missing_column_lists_the_columns(job_factory, tmp_path: Path) -> None:
    job = job_factory("dataset.template='{question}'")
    with pytest.raises(ConfigError) as err:
        load_rows(job.dataset, 1)
    message = str(err.value)
    assert "dataset.template=question: no such column in" in message
    assert "its columns are: task_id, prompt, entry_point, canonical_solution, test" in message
    path = write(tmp_path / "t.jsonl", [{"text": "x"}])
    with pytest.raises(ConfigError, match="dataset.turns_column=turns: no such column .* its columns are: text"):
        load_rows(local(job_factory, path, "dataset.prompt_format=turns"), None)


def test_missing_file_bad_format_and_bad_template(job_factory, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="dataset.path=.*matches no file"):
        load_rows(local(job_factory, f"{tmp_path}/nope.jsonl", "dataset.template='{q}'"), 1)
    (tmp_path / "data.txt").write_text("hello")
    with pytest.raises(ConfigError, match="set dataset.format=json|csv|parquet"):
        load_rows(local(job_factory, f"{tmp_path}/data.txt", "dataset.template='{q}'"), 1)
    with pytest.raises(ConfigError, match="not a valid format string"):
        template_fields("{prompt")
    # Attribute access would send a repr with a memory address as the prompt: refused before any row is read.
    with pytest.raises(ConfigError, match=r"field \{question.upper\} reads an attribute.*\{question\[key\]\}"):
        load_rows(
            local(
                job_factory, write(tmp_path / "q.jsonl", [{"question": "x"}]), "dataset.template='{question.upper}'"
            ),
            1,
        )
    with pytest.raises(ConfigError, match=r"field \{meta\[a\].__class__\} reads an attribute"):
        template_fields("{meta[a].__class__}")
    assert template_fields("{meta[a.b]} {q[0]}") == ["meta", "q"]  # a dot inside [key] is part of the key


def test_duplicate_ids_are_refused(job_factory, tmp_path: Path) -> None:
    path = write(tmp_path / "d.jsonl", [{"id": "same", "q": str(i)} for i in range(2)])
    with pytest.raises(ConfigError, match="dataset.id_column=id is not unique: 'same'"):
        load_rows(local(job_factory, path, "dataset.id_column=id", "dataset.template='{q}'"), None)


def test_a_null_id_is_named_as_null(job_factory, tmp_path: Path) -> None:
    # Not replaced by its position ("1"), which then clashed with the row whose id is "1".
    path = write(tmp_path / "n.jsonl", [{"id": "1", "q": "a"}, {"id": None, "q": "b"}])
    with pytest.raises(ConfigError, match=r"dataset.id_column=id is null in row 2 of the data set: give every row"):
        load_rows(local(job_factory, path, "dataset.id_column=id", "dataset.template='{q}'"), None)


def test_an_oversized_row_is_refused_by_its_characters_without_tokenizing_it(job_factory, monkeypatch) -> None:
    # A 200 MB line took ~150x its size to tokenize and got the job OOM-killed on every rerun.
    job = job_factory()
    tokenizer = load_tokenizer(job.model)
    longest = longest_token_chars(tokenizer)
    assert 8 <= longest <= 1000
    limit = job.model.max_model_len * longest
    fits = SourceRow("small", text="x" * limit)
    assert oversized_error(fits, [], tokenizer, job.model.max_model_len) is None
    huge = SourceRow("huge", messages=[{"role": "user", "content": "y" * (limit - 10)}])
    monkeypatch.setattr(tokenizer, "__call__", lambda *a, **k: pytest.fail("tokenized"), raising=False)
    message = oversized_error(huge, ["z" * 20], tokenizer, job.model.max_model_len)
    assert message and f"{limit + 10:,} characters cannot fit model.max_model_len=" in message


def test_prompt_too_long_is_described() -> None:
    assert length_error(Prompt("ok", "a", [1] * 10), max_tokens=10, max_model_len=64) is None
    message = length_error(Prompt("HumanEval/7", "b", [1] * 100), max_tokens=10, max_model_len=64)
    assert "100 prompt tokens + sampling.max_tokens=10 > model.max_model_len=64" in message


@pytest.mark.parametrize(
    ("preset", "source"),
    [
        ("gsm8k", "openai/gsm8k (config main, split test)"),
        ("speed_bench", "nvidia/SPEED-Bench (config qualitative, split test)"),
    ],
)
def test_unknown_hub_data_set_offline_fails_fast_before_any_model(tmp_path: Path, preset: str, source: str) -> None:
    began = time.monotonic()
    offline = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    result = run_generate([f"output_root={tmp_path}", f"dataset={preset}"], timeout=300, env=offline)
    assert result.returncode == 2, result.stderr[-2000:]
    output = result.stdout + result.stderr
    assert f"dataset.hub_id={source} could not be loaded" in output
    assert "not available here" in output and "dataset=local dataset.path=data.jsonl" in output
    assert "starting vLLM" not in output and "Traceback" not in output
    assert time.monotonic() - began < 120


def test_a_line_that_is_not_utf8_becomes_an_error_row_naming_its_line(job_factory, tmp_path: Path, caplog) -> None:
    # The byte 0xE9 alone is Latin-1 "é": Arrow reads it and used to fail only when the row was used, mid-run.
    good = json.dumps({"id": "a", "question": "fine"}).encode()
    path = tmp_path / "latin.jsonl"
    path.write_bytes(
        good + b'\n{"id":"b","question":"caf\xe9"}\n' + json.dumps({"id": "c", "question": "ok"}).encode()
    )
    rows = load_rows(local(job_factory, str(path), "dataset.template='{question}'", "dataset.id_column=id"), None)
    assert [(r.row_id, r.text) for r in rows] == [("a", "fine"), ("1", None), ("c", "ok")]
    assert rows[1].error.startswith("latin.jsonl line 2 is not valid UTF-8 (byte 0xe9 at column 26)")
    assert "iconv -f latin1 -t utf-8 latin.jsonl" in rows[1].error
    assert "latin.jsonl line 2" in caplog.text  # said before any model loads
    # A compressed file is not looked at up front: its row still becomes an error row, not a traceback.
    gz = tmp_path / "latin.jsonl.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    rows = load_rows(local(job_factory, str(gz), "dataset.template='{question}'", "dataset.id_column=id"), None)
    assert [r.row_id for r in rows if r.error is None] == ["a", "c"]
    assert "row 2 of" in rows[1].error and "is not valid UTF-8 (byte 0xe9)" in rows[1].error


def test_a_csv_that_is_not_utf8_is_refused_naming_its_line(job_factory, tmp_path: Path) -> None:
    path = tmp_path / "latin.csv"
    path.write_bytes(b"id,question\na,fine\nb,caf\xe9\n")
    with pytest.raises(ConfigError) as err:
        load_rows(local(job_factory, str(path), "dataset.template='{question}'"), None)
    assert str(err.value).startswith(f"dataset.path={path}: latin.csv line 3 is not valid UTF-8 (byte 0xe9)")
    assert "iconv -f latin1 -t utf-8 latin.csv" in str(err.value)


def test_a_broken_json_line_is_named_by_one_line_number(job_factory, tmp_path: Path, caplog, capfd) -> None:
    path = tmp_path / "broken.jsonl"
    good = [json.dumps({"q": f"q{i}"}) for i in range(4)]
    path.write_text("\n".join([good[0], good[1], "", '{"q": "x", oops}', good[2], good[3]]) + "\n")
    rows = load_rows(local(job_factory, str(path), "dataset.template='{q}'"), None)
    assert [r.text for r in rows] == ["q0", "q1", None, "q2", "q3"]
    # The 1-based line of the file (blank lines count), and no second line number from json's own message.
    assert rows[2].error == (
        "broken.jsonl line 4 is not a JSON object: Expecting property name enclosed in double quotes at column 12"
    )
    said = caplog.text + "".join(capfd.readouterr())
    assert "broken.jsonl line 4" in said and "row 3" not in said and "line 1 " not in said


@pytest.mark.parametrize(
    ("name", "content", "says"),
    [
        ("empty.jsonl", "", "is empty"),
        ("blank.jsonl", "\n\n", "is empty"),
        ("empty.csv", "", "is empty"),
        ("header.csv", "question\n", "holds no rows (only a header, or an empty list)"),
        ("empty.json", "[]", "holds no rows (only a header, or an empty list)"),
    ],
)
def test_an_empty_file_says_it_is_empty(job_factory, tmp_path: Path, name: str, content: str, says: str) -> None:
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(ConfigError) as err:
        load_rows(local(job_factory, str(path), "dataset.template='{question}'"), None)
    assert str(err.value).startswith(f"dataset.path={path} {says}")
    assert "no such column" not in str(err.value)


def test_an_empty_file_in_a_glob_is_skipped(job_factory, tmp_path: Path, caplog) -> None:
    write(tmp_path / "d" / "a.jsonl", ROWS)
    (tmp_path / "d" / "b.jsonl").write_text("")
    rows = load_rows(local(job_factory, f"{tmp_path}/d/*.jsonl", "dataset.template='{question}'"), None)
    assert len(rows) == 3 and "skipping" in caplog.text and "b.jsonl: the file is empty" in caplog.text


@pytest.mark.parametrize("column", ["turns", "messages"])
def test_text_format_over_chat_rows_suggests_the_prompt_format(job_factory, tmp_path: Path, column: str) -> None:
    path = write(
        tmp_path / "chat.jsonl", [{column: [{"role": "user", "content": "hi"}] if column == "messages" else ["hi"]}]
    )
    with pytest.raises(ConfigError) as err:
        load_rows(local(job_factory, path, "dataset.template='{question}'"), None)
    assert f"The rows hold {column}: to use it, set dataset.prompt_format={column} (and dataset.template=null)" in str(
        err.value
    )


def test_a_template_over_a_list_or_object_column_is_refused(job_factory, tmp_path: Path) -> None:
    path = write(tmp_path / "t.parquet", [{"turns": ["first", "second"], "meta": {"question": "q?"}}])
    with pytest.raises(ConfigError) as err:
        load_rows(local(job_factory, path, "dataset.template='Answer: {turns}'"), None)
    message = str(err.value)
    assert message.startswith("dataset.template=Answer: {turns} uses column turns, which holds lists, not text")
    assert "dataset.prompt_format=turns dataset.turns_column=turns" in message
    assert "dataset.prompt_format=messages" in message
    with pytest.raises(ConfigError, match="uses column meta, which holds objects.*e.g. {meta\\[question\\]}"):
        load_rows(local(job_factory, path, "dataset.template='{meta}'"), None)
    # One item of a list, or one field of an object, is text: allowed.
    [row] = load_rows(local(job_factory, path, "dataset.template='{turns[1]} / {meta[question]}'"), None)
    assert row.text == "second / q?"
    # A column that mixes text and lists (read as free-form JSON) is judged row by row.
    mixed = write(tmp_path / "mixed.jsonl", [{"q": "text"}, {"q": ["a", "list"]}])
    rows = load_rows(local(job_factory, mixed, "dataset.template='{q}'"), None)
    assert rows[0].text == "text" and "['q'] hold a list or object in this row, not text" in rows[1].error


def test_the_utf8_check_counts_lines_across_blocks(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(data_module, "_SCAN_BLOCK", 3)  # every character and line end straddles some block edge
    path = tmp_path / "t.jsonl"
    path.write_bytes("é\nçà\n".encode() + b"ok\n\xff\n")
    assert data_module._first_non_utf8_line(str(path)) == (4, "byte 0xff")
    path.write_bytes("é\nçà\n".encode())
    assert data_module._first_non_utf8_line(str(path)) is None
    path.write_bytes("é\n".encode() + "ç".encode()[:1])
    assert data_module._first_non_utf8_line(str(path)) == (2, "the file ends inside a character")


def test_speed_bench_rows_from_a_saved_split_and_its_placeholders_become_error_rows(
    job_factory, tmp_path: Path
) -> None:
    # Rows shaped as nvidia/SPEED-Bench's qualitative split: a licensed source's row holds the hub's placeholder.
    job = job_factory("dataset=speed_bench")
    placeholder = job.dataset.placeholder_prefix
    rows = [
        {"question_id": "q1", "category": "coding", "turns": ["Write a sort.", "Now in C."], "source": "x"},
        {"question_id": "q2", "category": "summarization", "turns": [f"{placeholder}\n\n{{article}}"], "source": "y"},
    ]
    path = write(tmp_path / "speed_bench_qualitative.jsonl", rows)
    job = job_factory("dataset=speed_bench", "dataset.hub_id=null", f"dataset.path={path}")
    good, held = load_rows(job.dataset, None)
    assert (good.row_id, good.category, good.turns, good.error) == (
        "q1",
        "coding",
        ["Write a sort.", "Now in C."],
        None,
    )
    assert (held.row_id, held.category, held.turns) == ("q2", "summarization", None)
    assert held.error is not None and held.error.startswith("the prompt is a placeholder ('FULL BENCHMARK DATA")
    # Without the prefix the same row would have gone to the model as a prompt.
    plain = job_factory(
        "dataset=speed_bench", "dataset.hub_id=null", f"dataset.path={path}", "dataset.placeholder_prefix=null"
    )
    assert load_rows(plain.dataset, None)[1].error is None
