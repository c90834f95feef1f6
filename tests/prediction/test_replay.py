"""Replaying drafting on token ids (specbatch.prediction), on hand-made completions: the engine's step rule, the
acceptance profile's arithmetic, what a run folder gives the replay, and jobs/predict.py's refusals (bad flags, damaged
or unfinished runs). (Against the engine's own counters: tests/run/test_generate_cpu.py.)"""

from __future__ import annotations

import dataclasses
import json
import logging
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import PROJECT_ROOT
from specbatch.common.atomic_files import atomic_write_json, atomic_write_text
from specbatch.config import to_plain_dict
from specbatch.engine.spec_metrics import Counters
from specbatch.prediction.figures import acceptance_profile, predicted_rows
from specbatch.prediction.predict_run import format_prediction, predict, write_prediction
from specbatch.prediction.replay import Drafting, replay
from specbatch.prediction.setups import NgramSetup, SuffixSetup, default_setups
from specbatch.prediction.turns import NoTokenIds, ReplayTurn, read_turns
from specbatch.run.folder import RunFolder
from specbatch.run.profile_schema import schema_problems
from specbatch.run.records.output_parts import SCHEMA, write_parquet
from specbatch.run.records.prediction_file import read_prediction
from specbatch.run.records.run_json import RUN_FORMAT
from specbatch.run.summary import RowTotals, summarize


def turn(prompt: list[int], completion: list[int], row: str = "r0", place: int = 0, category: str | None = None):
    return ReplayTurn(
        row_id=row,
        turn=1,
        sample_index=0,
        category=category,
        prompt=np.asarray(prompt, dtype=np.int32),
        completion=np.asarray(completion, dtype=np.int32),
        position=(0, 0, place),
        answered=(0, 0, place),
    )


def test_ngram_steps_as_the_engine_does() -> None:
    # Token 10 comes from the prefill, undrafted. With [10] known, the prompt's 10 is followed by 11 12 13: drafted
    # and all accepted, plus the step's own token 99. With [.. 13 99] known nothing matches: a step without a draft.
    [(_, figures)] = replay([turn([10, 11, 12, 13, 14, 15], [10, 11, 12, 13, 99, 100])], NgramSetup(3, 1, 2), 2048)
    assert (figures.drafts, figures.draft_tokens, figures.accepted, figures.per_position) == (1, 3, 3, [1, 1, 1])
    assert figures.unverified == 0
    # A rejection: the draft 11 12 13 against 11 7 ...: one accepted, and the step advances by two.
    [(_, figures)] = replay([turn([10, 11, 12, 13], [10, 11, 7, 8])], NgramSetup(3, 1, 2), 2048)
    assert (figures.drafts, figures.accepted, figures.per_position) == (1, 1, [1])


def test_a_draft_past_the_completions_end_is_unverified_not_accepted() -> None:
    [(_, figures)] = replay([turn([10, 11, 12, 13, 14], [10, 11, 12])], NgramSetup(3, 1, 2), 2048)
    assert (figures.draft_tokens, figures.accepted, figures.unverified) == (3, 2, 1)


def test_ngram_respects_max_model_len_as_vllm_does() -> None:
    # vLLM drafts at most max_model_len - context tokens: with 7 known of 8, one.
    [(_, figures)] = replay([turn([10, 11, 12, 13, 14, 15], [10, 11, 12])], NgramSetup(3, 1, 2), max_model_len=8)
    assert figures.draft_tokens == 1 and figures.accepted == 1


def test_the_profile_adds_up_and_never_increases() -> None:
    figures = Drafting()
    for accepted in (3, 1, 0, 2):
        figures.step(3, accepted, 0)
    profile = acceptance_profile(figures, 3)
    assert profile["accepted_per_position"] == [3, 2, 1]
    assert profile["marginal_acceptance"] == [0.75, 0.5, 0.25]
    assert profile["conditional_acceptance"] == pytest.approx([0.75, 2 / 3, 0.5])
    assert profile["acceptance_length"] == pytest.approx(1 + sum(profile["marginal_acceptance"])) == 2.5
    assert profile["acceptance_rate"] == pytest.approx(6 / 12)


def test_rows_per_category_and_overall() -> None:
    turns = [
        turn([10, 11, 12, 13], [10, 11, 12, 13], "a", 0, "edit"),
        turn([20, 21, 22, 23], [20, 21, 22, 23], "b", 1, "chat"),
    ]
    setup = NgramSetup(2, 1, 2)
    rows = {row["category"]: row for row in predicted_rows(setup, replay(turns, setup, 2048))}
    assert set(rows) == {"(all)", "edit", "chat"}
    assert rows["(all)"]["rows"] == 2 and rows["edit"]["rows"] == rows["chat"]["rows"] == 1
    assert rows["(all)"]["drafts"] == rows["edit"]["drafts"] + rows["chat"]["drafts"]


def test_suffix_drafts_from_earlier_responses_and_the_batch_decides_how_much_it_saw() -> None:
    # Row b's prompt says nothing of its answer; row a answered the same. One at a time, b drafts from a's whole
    # response; side by side (in engine steps, a first in the batch) b sees a's response only as far as a got.
    answer = [50, 51, 52, 53, 54, 55, 56, 57, 58, 59]
    a, b = turn([1, 2, 3], answer, "a", 0), turn([4, 5, 6], answer, "b", 1)
    setup = SuffixSetup(4, min_token_prob=0.0)
    alone = dict((t.row_id, f) for t, f in replay([a, b], setup, 2048, {0: 1}))
    together = dict((t.row_id, f) for t, f in replay([a, b], setup, 2048, {0: 2}))
    assert alone["a"].accepted == together["a"].accepted == 0  # nothing before it to draft from
    assert alone["b"].accepted == alone["b"].draft_tokens > 0  # every drafted token was a's, and right
    # Side by side from the same step, a is never ahead of b: nothing of a's to draft from.
    assert together["b"].accepted == 0


def write_run(
    tmp_path: Path, job_factory, rows: list[dict], concurrency: int = 2, overrides: tuple[str, ...] = ()
) -> Path:
    job = job_factory("tracking=off", "model.dtype=float32", f"output_root={tmp_path}", *overrides)
    layout = RunFolder.for_job(job)
    config = to_plain_dict(job)
    atomic_write_json(layout.run_json, {"format": RUN_FORMAT, "config": config, "shard_count": 1})
    base = dict.fromkeys(SCHEMA.names) | {"turn": 1, "sample_index": 0, "status": "ok", "method": "ngram"}
    write_parquet([base | row for row in rows], layout.part_path(0), config)
    totals = RowTotals(rows=len(rows))
    figures = {"generation_seconds": 1.0, "engine_startup_seconds": 0.0, "warmup_seconds": 0.0}
    layout.write_summary(summarize(Counters(), method="ngram", k=3, totals=totals, concurrency=concurrency, **figures))
    atomic_write_text(layout.done_marker, "done\n")
    return layout.root


def test_a_run_folder_is_replayed_and_what_cannot_be_is_named(tmp_path: Path, job_factory) -> None:
    rows = [
        {"row_id": "ok", "prompt_token_ids": [10, 11, 12, 13], "completion_token_ids": [10, 11, 12, 13, 9]},
        {"row_id": "failed", "status": "error", "error": "too long"},
        {"row_id": "old", "completion_token_ids": [1, 2, 3]},
    ]
    root = write_run(tmp_path, job_factory, rows)
    run = read_turns(root)
    assert [t.row_id for t in run.turns] == ["ok"] and run.concurrency == {0: 2}
    assert [(r, why.split(" (")[0]) for r, _, why in run.skipped] == [
        ("failed", "error row"),
        ("old", "no prompt token ids"),
    ]
    prediction = predict(root, default_setups(run.config, (1, 2), (), (3,)))
    assert [row["setup"] for row in prediction.overall] == ["ngram-k1-n2-4", "ngram-k2-n2-4", "suffix-k3-d24-f1"]
    text = format_prediction(prediction)
    assert "not replayed (error row): 1: failed#1" in text and "old#1" in text
    out = write_prediction(prediction)
    assert (out / "predicted.json").is_file() and (out / "predicted.parquet").is_file()
    # Each set-up's profile in ModelOpt's schema, replayed rather than measured, its set-up kept beside.
    profiles = read_prediction(out)["setups"]
    assert [(p["specbatch"]["setup"], p["num_speculative_tokens"]) for p in profiles] == [
        ("ngram-k1-n2-4", 1),
        ("ngram-k2-n2-4", 2),
        ("suffix-k3-d24-f1", 3),
    ]
    for profile, row in zip(profiles, prediction.overall, strict=True):
        assert schema_problems(profile) == [] and profile["measured"] is False
        assert profile["marginal_accept_rates"] == pytest.approx(row["marginal_acceptance"], abs=1e-6)
        assert profile["specbatch"]["drafts"] == row["drafts"] == sum(profile["acceptance_length_histogram"].values())
        assert profile["measurement_conditions"]["concurrency"] == 2


def test_a_run_without_prompt_token_ids_is_refused_with_why(tmp_path: Path, job_factory) -> None:
    root = write_run(tmp_path, job_factory, [{"row_id": "old", "completion_token_ids": [1, 2, 3]}])
    with pytest.raises(NoTokenIds, match="written before output schema 4"):
        read_turns(root)


def test_a_damaged_or_unfinished_run_is_refused_in_one_line_each(
    tmp_path: Path, job_factory, monkeypatch, caplog
) -> None:
    """jobs/predict.py over runs each damaged in one way, or not finished: one line each naming the file (or the
    shards not done and how to finish them), exit code 2, and nothing written into them; a good run beside them is
    predicted."""
    good = write_run(
        tmp_path, job_factory, [{"row_id": "ok", "prompt_token_ids": [1, 2], "completion_token_ids": [1]}]
    )
    record = json.loads((good / "run.json").read_text())
    damage = {
        "summary-cut": (lambda f: f.stats_path.write_text("{"), "stats/shard-00000-of-00001.json is damaged"),
        "part-cut": (
            lambda f: f.part_path(0).write_bytes(f.part_path(0).read_bytes()[:100]),
            "part-00000.parquet: it is not a readable Parquet file",
        ),
        "run-cut": (lambda f: f.run_json.write_text("{"), "run.json is damaged (not JSON"),
        "run-newer": (
            lambda f: f.run_json.write_text(json.dumps({**record, "format": RUN_FORMAT + 1})),
            "run.json was written by a newer version of specbatch",
        ),
        "unfinished": (
            lambda f: f.done_marker.unlink(),
            "1 of 1 shards are not done: 0 (partial). Finish them (rerun with shard.index=<i> shard.count=1",
        ),
    }
    for name, (act, _) in damage.items():
        shutil.copytree(good, tmp_path / name)
        act(RunFolder(tmp_path / name))
    runs = [str(tmp_path / name) for name in damage]
    monkeypatch.setattr(
        sys, "argv", ["predict.py", *runs, str(good), "--methods", "ngram", "--ngram-k", "1", "--no-mlflow"]
    )
    main = runpy.run_path(str(PROJECT_ROOT / "jobs" / "predict.py"))["main"]
    with caplog.at_level(logging.ERROR, logger="specbatch.prediction"):
        assert main() == 2
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == len(damage)
    for (name, (_, said)), line in zip(damage.items(), errors, strict=True):
        assert str(tmp_path / name) in line and said in line and "\n" not in line, (name, line)
        assert not (tmp_path / name / "prediction").exists()
    assert (good / "prediction" / "predicted.json").is_file()


def test_a_simulated_run_is_refused_in_one_line_and_nothing_is_written(
    tmp_path: Path, job_factory, monkeypatch, caplog
) -> None:
    # Its text holds the accepted placeholders, not answers: a prediction replayed on them was written into it.
    simulated = ("spec=simulate", "spec.synthetic_acceptance_rates=[0.8,0.5]")
    row = {"row_id": "ok", "prompt_token_ids": [1, 2], "completion_token_ids": [1]}
    root = write_run(tmp_path, job_factory, [row], overrides=simulated)
    monkeypatch.setattr(sys, "argv", ["predict.py", str(root), "--no-mlflow"])
    main = runpy.run_path(str(PROJECT_ROOT / "jobs" / "predict.py"))["main"]
    with caplog.at_level(logging.ERROR, logger="specbatch.prediction"):
        assert main() == 2
    [error] = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert error.startswith(f"{root} ran spec.method=simulate, at a given acceptance: its text is not a real output")
    assert "Predict from a run of a real method" in error and not (root / "prediction").exists()


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--ngram-k", "0"], "--ngram-k"),
        (["--methods", "eagle"], "--methods"),
        (["--ngram-window", "4-2"], "--ngram-window"),
    ],
)
def test_bad_arguments_get_one_line_naming_the_flag(tmp_path: Path, args: list[str], flag: str) -> None:
    result = subprocess.run(
        [sys.executable, str(PROJECT_ROOT / "jobs" / "predict.py"), str(tmp_path), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    [line] = [line for line in result.stderr.splitlines() if "error:" in line]
    assert flag in line


def test_unverified_draft_tokens_are_expected_at_the_acceptance_seen_where_it_was_verified() -> None:
    figures = Drafting()
    # Position 0 verified 4 times and accepted 3 times; position 1 reached 3 times, accepted once.
    figures.step(2, 2, 0)
    figures.step(2, 1, 0)
    figures.step(2, 1, 0)
    figures.step(2, 0, 0)
    # A draft that matched the one token left and ran 1 past the end, and one that ran 2 past it from the start.
    figures.step(2, 1, 1)
    figures.step(2, 0, 2)
    # reached: position 0 by all 5 verified, position 1 by the 3 that accepted 0 and then the tail's own: 3 + 0.
    assert figures.reached == [5, 3] and figures.per_position == [4, 1]
    q0, q1 = 4 / 5, 1 / 3
    assert figures.expected_unverified_accepted() == pytest.approx(q1 + (q0 + q0 * q1))
    profile = acceptance_profile(figures, 2)
    assert profile["acceptance_length_estimate"] == pytest.approx(1 + (5 + q1 + q0 + q0 * q1) / 6)


def test_only_drafts_past_a_max_tokens_cut_are_estimated_not_past_a_stop() -> None:
    # A draft of 3 verified in full (positions 0-2 accepted), then one with a single token left: 2 past the end.
    prompt, completion = [10, 11, 12, 13, 14, 15, 16], [10, 11, 12, 13, 99, 11, 12]
    for finish, estimated in (("length", True), ("stop", False)):
        one = dataclasses.replace(turn(prompt, completion), finish_reason=finish)
        [(_, figures)] = replay([one], NgramSetup(3, 1, 2), 2048)
        assert figures.unverified > 0
        assert (figures.expected_unverified_accepted() > 0) is estimated
