"""jobs/check_lossless.py's refusals before the referee loads a model (specbatch.analysis.lossless.run_check): a run
whose tokens no model sampled (the dummy backend's), and a run.json whose sampler cannot be read, each in one line."""

from __future__ import annotations

import json
import logging
import runpy
import shutil
import sys
from pathlib import Path

import pytest

from conftest import PROJECT_ROOT, fake_engine
from specbatch.analysis.lossless.run_check import result_path
from specbatch.pipeline import run_job


def check_lossless(root: Path, monkeypatch: pytest.MonkeyPatch, caplog) -> tuple[int, list[str]]:
    """jobs/check_lossless.py on ``root`` in this process: its exit code and its error lines."""
    monkeypatch.setattr(sys, "argv", ["check_lossless.py", str(root), "--no-mlflow"])
    main = runpy.run_path(str(PROJECT_ROOT / "jobs" / "check_lossless.py"))["main"]
    caplog.clear()
    with caplog.at_level(logging.ERROR):
        code = main()
    return code, [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def sampled_run(local_job_factory, *overrides: str) -> Path:
    job = local_job_factory("tracking=off", "sampling=sampled", "sampling.max_tokens=8", *overrides, rows=2)
    return run_job(job, engine=fake_engine(job)).folder.root


def test_a_dummy_backend_run_gets_no_verdict_its_tokens_are_no_models(local_job_factory, monkeypatch, caplog) -> None:
    # It was scored against the model its config names, and "differs": a verdict on made-up tokens.
    root = sampled_run(local_job_factory, "engine.backend=dummy")
    code, errors = check_lossless(root, monkeypatch, caplog)
    assert code == 2 and len(errors) == 1, errors
    said = (
        f"{root} ran engine.backend=dummy: its tokens were made up by the dummy backend, which has no model, so no "
        "lossless verdict applies"
    )
    assert said in errors[0] and not result_path(root).exists()


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (lambda sampling: sampling.pop("temperature"), "is damaged (it lacks sampling.temperature)"),
        (lambda sampling: sampling.update(top_p="0.95"), "is damaged (sampling.top_p is '0.95', not a number)"),
    ],
)
def test_a_run_json_without_a_readable_sampler_is_one_line_naming_the_file_and_the_key(
    local_job_factory, tmp_path: Path, monkeypatch, caplog, edit, said: str
) -> None:
    # A copy under a name of its own carries no digest to hold its run.json to (in the run's own folder an edited
    # run.json is refused as such first): the sampler's keys were indexed as they were, KeyError and TypeError.
    copy = tmp_path / "copy-of-a-run"
    shutil.copytree(sampled_run(local_job_factory), copy)
    record = json.loads((copy / "run.json").read_text())
    edit(record["config"]["sampling"])
    (copy / "run.json").write_text(json.dumps(record))
    code, errors = check_lossless(copy, monkeypatch, caplog)
    assert code == 2 and len(errors) == 1, errors
    assert f"{copy / 'run.json'} {said}: restore it from a copy of the run folder" in errors[0]
    assert not result_path(copy).exists()
