"""A run with a k schedule (spec.k_schedule) is a set-up of its own in jobs/compare.py: never pooled with the fixed k
that equals its largest k, labelled as a schedule in the table, the files, the recommendation and MLflow's names."""

from __future__ import annotations

import json

from test_compare import SAME, write_run

from specbatch.analysis.compare import compare
from specbatch.analysis.run_data import load_run
from specbatch.analysis.tables import flat_rows, format_comparison
from specbatch.config import spec_label

SCHEDULE = "spec.k_schedule=[[1,1,5],[2,256,1]]"


def test_a_schedule_is_its_own_set_up_next_to_the_same_largest_k(job_factory) -> None:
    base = write_run(job_factory, SAME, 100.0, "spec=none")
    fixed = write_run(job_factory, SAME, 150.0, "spec.num_speculative_tokens=5")
    scheduled = write_run(job_factory, SAME, 180.0, SCHEDULE)
    # Both have k=5 (the schedule's largest k) but they are different folders and different set-ups.
    assert fixed != scheduled and "ngram-sched-1to1k5-2to256k1-" in scheduled.name
    result = compare([load_run(p) for p in (base, fixed, scheduled)])
    rows = {(r.method, r.k, None if r.k_schedule is None else str(r.k_schedule)): r for r in result.rows}
    assert set(rows) == {("none", None, None), ("ngram", 5, None), ("ngram", 5, "[[1, 1, 5], [2, 256, 1]]")}
    assert all(r.repeats == 1 for r in result.rows), "the schedule was pooled with the fixed k"
    sched_row = rows[("ngram", 5, "[[1, 1, 5], [2, 256, 1]]")]
    assert abs((sched_row.speedup or 0) - 1.8) < 1e-9 and abs((rows[("ngram", 5, None)].speedup or 0) - 1.5) < 1e-9
    # Fixed k's come first, then the schedules of the same method.
    assert [r.k_schedule is not None for r in result.rows] == [False, False, True]

    (rec,) = result.recommendations
    # A schedule is never the pick for one batch size (its k changes with the batch; compare writes schedules from
    # the picks): the fixed k is picked although the schedule ran faster here.
    assert (rec.method, rec.k) == ("ngram", 5)
    assert rec.best_k_per_method == {"ngram": 5}
    text = format_comparison(result)
    assert "| ngram | schedule 1-1:5 2-256:1 |" in text
    flat = {r["k_schedule"] for r in flat_rows(result)}
    assert flat == {"", "1-1:5 2-256:1"}
    assert spec_label(sched_row.method, sched_row.k, sched_row.k_schedule) == "ngram-sched-1to1k5-2to256k1"


def test_runs_written_before_schedules_still_compare_as_fixed_k(job_factory) -> None:
    base = write_run(job_factory, SAME, 100.0, "spec=none", legacy=True)
    old = write_run(job_factory, SAME, 150.0, legacy=True)
    # An older run.json has no spec.k_schedule at all.
    assert "k_schedule" not in json.loads((old / "run.json").read_text())["config"]["spec"]
    run = load_run(old)
    assert run.k_schedule is None
    result = compare([load_run(base), run])
    assert [r.k_schedule for r in result.rows] == [None, None] and result.recommendations[0].k == 3


def test_the_schedule_decides_the_folder_and_k(job_factory) -> None:
    # Two schedules with the same largest k are two folders; the same schedule is one folder whatever
    # spec.num_speculative_tokens says (k is taken from the schedule).
    a = write_run(job_factory, SAME, 150.0, SCHEDULE)
    b = write_run(job_factory, SAME, 150.0, "spec.k_schedule=[[1,8,5],[9,256,2]]")
    assert a != b and a == write_run(job_factory, SAME, 150.0, SCHEDULE, "spec.num_speculative_tokens=2")


def test_mlflow_names_and_tags_say_schedule(job_factory) -> None:
    from specbatch.config import to_plain_dict
    from specbatch.run.folder import RunFolder
    from specbatch.tracking.run_contents import run_identity

    job = job_factory(SCHEDULE)
    identity = run_identity(to_plain_dict(job), RunFolder.for_job(job))
    assert identity.name == "ngram-sched-1to1k5-2to256k1 · full batch · smollm2-135m-instruct"
    assert identity.tags["k_schedule"] == "1-1:5 2-256:1" and identity.tags["k"] == "5"
    fixed = job_factory("spec.num_speculative_tokens=5")
    assert "k_schedule" not in run_identity(to_plain_dict(fixed), RunFolder.for_job(fixed)).tags


def test_a_schedule_run_is_left_out_of_the_repeats_a_pick_stands_on(job_factory) -> None:
    from specbatch.analysis.report import Sources, repeat_command

    folders = [
        write_run(job_factory, SAME, 100.0, "spec=none"),
        write_run(job_factory, SAME, 150.0, "spec.num_speculative_tokens=5"),
        write_run(job_factory, SAME, 180.0, SCHEDULE),
    ]
    runs = [load_run(p) for p in folders]
    result = compare(runs)
    (rec,) = result.recommendations
    # Too few repeats of the baseline and the fixed k; the schedule is not listed as one more "ngram k=5".
    assert not rec.enough_repeats
    assert rec.reason.count("ngram k=5") == 1 and "(none: 1, ngram k=5: 1;" in rec.reason, rec.reason
    command = repeat_command(Sources(folders), result, runs)
    # Sweeping the schedule onto every run would run spec=none and k=5 with it (and make k=5 a schedule).
    assert command is not None and "k_schedule" not in command and "repeat=0,1,2" in command
