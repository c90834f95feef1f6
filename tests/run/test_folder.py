"""Run folders are deterministic: the same set-up finds its folder, a different one never shares it."""

from __future__ import annotations

import errno
import logging
import os
import runpy
import sys
from pathlib import Path

import pytest

from conftest import PROJECT_ROOT, fake_engine
from specbatch.config import ConfigError, run_folder_digest
from specbatch.pipeline import run_job
from specbatch.run.folder import RunFolder, read_run, shard_folders


def test_same_setup_same_folder_different_setup_different_folder(job_factory) -> None:
    base = RunFolder.for_job(job_factory())
    assert base == RunFolder.for_job(job_factory())
    assert base.root.parent.name == "smollm2-135m-instruct" and base.root.parent.parent.name == "humaneval_edit"
    assert base.root.name.startswith("ngram-k3-")
    others = {
        RunFolder.for_job(job_factory(*o)).root
        for o in (["spec.num_speculative_tokens=4"], ["spec=none"], ["sampling.max_tokens=32"], ["max_samples=3"])
    }
    assert base.root not in others and len(others) == 4
    # Where results are logged does not change what is generated.
    assert run_folder_digest(job_factory()) == run_folder_digest(job_factory("tracking=off"))


def test_run_name_replaces_the_readable_part(job_factory) -> None:
    layout = RunFolder.for_job(job_factory("run_name=repeat2"))
    assert layout.root.name.startswith("repeat2-")
    assert layout.part_path(12).name == "part-00012.parquet"
    assert layout.data_dir.name == "shard-00000-of-00001"
    assert layout.done_marker == layout.root / "done" / "shard-00000-of-00001"


def test_every_shard_record_has_its_place_in_the_shard_stats_folder(job_factory) -> None:
    folder = RunFolder.for_job(job_factory(), 2, 3)
    assert folder.stats_dir == folder.root / "stats" / "shard-00002-of-00003"
    assert {folder.part_stats_path(0).parent, folder.launch_record_path("abc").parent} == {folder.stats_dir}
    assert folder.source_record_path.parent == folder.stats_dir
    assert folder.stats_path == folder.root / "stats" / "shard-00002-of-00003.json"


def test_parts_are_listed_in_order_without_temporaries(tmp_path) -> None:
    folder = RunFolder(tmp_path, 0, 1)
    assert folder.parts() == [] and folder.read_source_record() is None and folder.read_launch_record("x") is None
    folder.data_dir.mkdir(parents=True)
    for name in ("part-00010.parquet", "part-00002.parquet", ".part-00003.parquet.tmp-77"):
        (folder.data_dir / name).write_bytes(b"")
    assert folder.parts() == [folder.part_path(2), folder.part_path(10)]
    folder.remove_stale_temporaries()
    assert sorted(p.name for p in folder.data_dir.iterdir()) == ["part-00002.parquet", "part-00010.parquet"]


def test_the_shards_of_a_run_come_from_its_record(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="is not a run folder"):
        read_run(tmp_path)
    assert RunFolder(tmp_path, 0, 3).claim_run_record({"config": {}, "shard_count": 3})
    assert shard_folders(tmp_path) == [RunFolder(tmp_path.resolve(), i, 3) for i in range(3)]


def test_a_name_too_long_for_its_file_system_is_refused_before_anything_loads(local_job_factory, tmp_path) -> None:
    # Only when run.json was written, after the model had loaded, did the OS say "File name too long".
    job = local_job_factory("engine.backend=dummy", "tracking=off", f"model.name={'m' * 300}", rows=2)
    with pytest.raises(ConfigError) as err:
        run_job(job)
    message = str(err.value)
    assert f"the run folder {RunFolder.for_job(job).root} has a name of 'mmmm" in message
    assert "(300 bytes), more than the 255 bytes its file system takes (from model.name: choose a shorter" in message
    assert not (tmp_path / "outputs").exists()


def test_an_os_error_for_a_name_too_long_names_it_and_how_to_shorten_it(tmp_path) -> None:
    # The backstop for what the check before loading cannot see: not "fix the cause (e.g. free disk space)".
    path = tmp_path / ("x" * 260) / "run.json"
    message = RunFolder.describe_os_error(OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG), str(path)))
    assert message.startswith("stopped by an OS error: 'xxxx") and f"(260 bytes) in {path} is longer" in message
    assert "choose a shorter output_root, or set run_name=<a shorter name>" in message and "disk" not in message
    full = RunFolder.describe_os_error(OSError(errno.ENOSPC, "No space left on device"))
    assert "fix the cause (e.g. free disk space)" in full


# The jobs that read run folders, each with the flags that keep it off MLflow.
READERS = {
    "status.py": [],
    "merge.py": ["--no-mlflow"],
    "predict.py": ["--no-mlflow"],
    "check_lossless.py": ["--no-mlflow"],
    "compare.py": ["--no-mlflow"],
}


def run_reader(script: str, args: list[str], monkeypatch: pytest.MonkeyPatch, caplog) -> tuple[int, list[str]]:
    """jobs/<script> on ``args`` and its own flags (READERS) in this process: its exit code and its error lines."""
    monkeypatch.setattr(sys, "argv", [script, *args, *READERS[script]])
    caplog.clear()
    with caplog.at_level(logging.ERROR):
        code = runpy.run_path(str(PROJECT_ROOT / "jobs" / script))["main"]()
    return code, [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_file_given_for_a_run_folder_is_one_line_naming_the_folder_to_pass(
    local_job_factory, tmp_path: Path, monkeypatch, caplog
) -> None:
    # Each said NotADirectoryError in a traceback: the run folder's records were looked for below the file.
    job = local_job_factory("tracking=off", rows=2)
    root = run_job(job, engine=fake_engine(job)).folder.root
    plain = tmp_path / "notes.txt"
    plain.write_text("not a run\n")
    said = f"{root / 'run.json'} is a file of the run folder {root}, not the folder: pass the folder, {root}"
    for script in ("status.py", "merge.py", "predict.py", "check_lossless.py"):
        code, errors = run_reader(script, [str(root / "run.json")], monkeypatch, caplog)
        assert code == 2 and len(errors) == 1 and said in errors[0], (script, errors)
        code, errors = run_reader(script, [str(plain)], monkeypatch, caplog)
        assert code == 2 and len(errors) == 1, (script, errors)
        assert f"{plain} is a file, not a run folder: pass outputs/runs/<dataset>/<model>/<run>" in errors[0]
    assert not (root / "prediction").exists() and not (root / "lossless").exists()
