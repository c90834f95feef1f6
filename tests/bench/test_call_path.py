"""The shard executor's call path stays short (issue 51): one small dummy run goes from the executor into the run
folder's paths and into the executor itself at most as often as when the executor began asking its resume plan
(5dfb33a, before: 21 calls of 16 folder functions, 11 calls of 10 executor functions)."""

from __future__ import annotations

from conftest import CONF_DIR
from specbatch.bench.call_path import count_here


def test_one_dummy_run_walks_the_folder_through_its_resume_plan() -> None:
    counts = count_here(CONF_DIR)
    assert counts["into_folder"] <= 4, counts
    assert set(counts["into_folder_functions"]) <= {"for_job", "lock_path", "data_dir", "mark_done"}, counts
    assert counts["into_executor"] <= 6 and len(counts["into_executor_functions"]) <= 5, counts
