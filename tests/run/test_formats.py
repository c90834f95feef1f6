"""Run folders written by older versions (run/formats.py): a folder of each older run format, built here from a run
of today's job rewritten as that version wrote it, is found again by its job, read by status, merge and compare as
today's, and keeps its digests. A record from a newer version is refused in one line naming the file."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from conftest import fake_engine
from specbatch.analysis.report import find_runs, run_compare
from specbatch.config import ConfigError
from specbatch.config.identity import workload_digest
from specbatch.pipeline import merge_run, run_job
from specbatch.run.folder import RunFolder, read_run
from specbatch.run.formats import RUN_FORMAT
from specbatch.run.status_merge import run_status


def as_format_1(record: dict[str, Any]) -> dict[str, Any]:
    """A run record as versions before run formats wrote it: no format, and none of the config fields added since
    (each of which declares the value those runs had)."""
    old = copy.deepcopy(record)
    del old["format"]
    del old["config"]["engine"]["backend"]
    del old["config"]["spec"]["k_schedule"]
    del old["config"]["repeat"]
    return old


OLDER_FORMATS = {1: as_format_1}


@pytest.mark.parametrize("version", sorted(OLDER_FORMATS))
def test_a_run_of_an_older_format_is_found_read_merged_and_compared_as_today(
    local_job_factory, tmp_path: Path, version: int
) -> None:
    runs = {}
    for spec in ("none", "ngram"):
        job = local_job_factory(f"spec={spec}", "max_samples=4", rows=4)
        result = run_job(job, engine=fake_engine(job))
        runs[spec] = (job, result.folder)
    today = {spec: json.loads(folder.run_json.read_text()) for spec, (_, folder) in runs.items()}
    assert {record["format"] for record in today.values()} == {RUN_FORMAT}
    for spec, (_, folder) in runs.items():
        folder.run_json.write_text(json.dumps(OLDER_FORMATS[version](today[spec])))

    for spec, (job, folder) in runs.items():
        # Read as today's version writes it, with the same workload digest (the baseline is found the same way).
        assert read_run(folder.root) == today[spec]
        assert workload_digest(read_run(folder.root)["config"]) == workload_digest(today[spec]["config"])
        # The job finds its folder again (same digest) and sees it complete: nothing is generated twice.
        assert RunFolder.for_job(job).root == folder.root
        again = run_job(job, engine=fake_engine(job))
        assert not again.generated
        assert [s.state for s in run_status(folder.root)] == ["done"]
        merged = merge_run(folder.root, log_to_mlflow=False)
        assert merged.summary.rows == 4
    # The file on disk is the run's: reading it never rewrote it.
    assert "format" not in json.loads(runs["ngram"][1].run_json.read_text())

    compared = run_compare(find_runs([tmp_path / "outputs"]), tmp_path / "comparison", log_to_mlflow=False)
    rows = {row.method: row for row in compared.comparison.rows}
    assert set(rows) == {"none", "ngram"}
    assert rows["ngram"].engine == "vllm" and rows["ngram"].k_schedule is None and rows["ngram"].repeats == 1
    assert rows["ngram"].rows_compared == 4


def test_a_run_of_a_newer_format_is_one_error_naming_the_file(local_job_factory) -> None:
    job = local_job_factory("spec=none", rows=2)
    folder = run_job(job, engine=fake_engine(job)).folder
    record = json.loads(folder.run_json.read_text())
    folder.run_json.write_text(json.dumps({**record, "format": RUN_FORMAT + 1}))
    with pytest.raises(ConfigError, match=rf"{folder.run_json} was written by a newer version of specbatch"):
        read_run(folder.root)
