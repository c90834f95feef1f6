"""jobs/bench.py --auto's plan and runs: the cells, the short sweep, the rounds with a fixed run of auto's choice, and
resuming (jobs made up by a fake jobs/generate.py; no engine)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from specbatch.bench import auto_bench
from specbatch.bench.auto_bench import (
    DEFAULT_CELLS,
    WORKLOADS,
    AutoPlan,
    cell_list,
    chosen_overrides,
    measure_cell,
    report,
    run_one,
)
from specbatch.bench.auto_cells import Measured
from specbatch.bench.full_engine import Throughput
from specbatch.common.environment import PROJECT_ROOT
from specbatch.config import register_configs
from specbatch.config.compose import compose_job

SETUPS = ["none", "ngram-k3", "ngram-k5", "suffix-k5"]


def test_the_default_cells_are_the_issues_four_on_workloads_that_compose() -> None:
    assert cell_list(DEFAULT_CELLS) == (("helpdesk", 16), ("helpdesk", None), ("code_edit", 16), ("retrieval", 16))
    assert cell_list("chat@4, chat@4,chat@full") == (("chat", 4), ("chat", None))
    with pytest.raises(argparse.ArgumentTypeError, match="'mt' is no workload; choose from helpdesk"):
        cell_list("mt@16")
    with pytest.raises(argparse.ArgumentTypeError, match="'chat' needs @full or @<batch of 1 or more>"):
        cell_list("chat")
    register_configs()
    for overrides in WORKLOADS.values():
        assert compose_job(overrides).dataset.name == overrides[0].split("=")[1]
    args = argparse.Namespace(
        setups=None, cells=DEFAULT_CELLS, rows=None, auto_max_tokens=128, repeats=2, sweep_rows=200
    )
    plan = AutoPlan.from_args(args)
    assert plan.rows == 1000 and plan.repeats == 2 and plan.setups[0] == "none" and len(plan.cells) == 4


def test_a_k_schedule_choice_runs_fixed_with_its_schedule() -> None:
    decision = {"winner": "ngram-sched-1to4k3-5to256k0", "overrides": "spec=ngram spec.num_speculative_tokens=3"}
    schedule = [[1, 4, 3], [5, 256, 0]]
    assert chosen_overrides({**decision, "k_schedule": schedule}) == [
        "spec=ngram",
        "spec.num_speculative_tokens=3",
        "spec.k_schedule=[[1,4,3],[5,256,0]]",
    ]
    quoted = {"winner": "x", "overrides": "spec=ngram 'spec.k_schedule=[[1,4,3]]'", "k_schedule": [[1, 4, 3]]}
    assert chosen_overrides(quoted) == ["spec=ngram", "spec.k_schedule=[[1,4,3]]"]
    assert chosen_overrides({"winner": "suffix-k5"}) == ["spec=suffix", "spec.num_speculative_tokens=5"]


class FakeGenerate:
    """jobs/generate.py made up: each set-up's tok/s from ``rates``, spec=auto's decision from ``picks`` in turn."""

    def __init__(self, rates: dict[str, float], picks: list[str]) -> None:
        self.rates, self.picks, self.calls = rates, list(picks), []

    def __call__(self, overrides: list[str], root: Path) -> Measured:
        self.calls.append((root.name, overrides))
        label = _label(overrides)
        decision = None
        if label == "auto":
            winner = self.picks.pop(0)
            decision = {"winner": winner, "overrides": " ".join(auto_bench.setup_overrides(winner))}
        rate = self.rates[label]
        return Measured(label, Throughput(1000, 1000, 900 / rate, 1000 / rate), 5.0, decision)


def _label(overrides: list[str]) -> str:
    spec = next(o.split("=")[1] for o in overrides if o.startswith("spec="))
    k = next((o.split("=")[1] for o in overrides if o.startswith("spec.num_speculative_tokens=")), None)
    return spec if k is None else f"{spec}-k{k}"


def _fake(monkeypatch: pytest.MonkeyPatch, fake: FakeGenerate) -> None:
    def run(
        setup: str, spec: list[str], workload: list[str], plan: Any, root: Path, batch: Any, rows: Any, history: Any
    ) -> Any:
        assert (
            workload == WORKLOADS["helpdesk"]
            and batch == 16
            and history == root.parent.parent / "history"
            or (history == root.parent / "history")
        ), "every job of the cell writes its run in one output_root"
        assert rows == (plan.sweep_rows if root.parent.name == "sweep" else plan.rows)
        return fake([*workload, *spec], root)

    monkeypatch.setattr(auto_bench, "run_one", run)


def test_the_sweep_keeps_the_two_fastest_and_a_choice_outside_them_is_run_fixed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rates = {"none": 100.0, "ngram-k3": 140.0, "ngram-k5": 130.0, "suffix-k5": 120.0, "auto": 125.0}
    fake = FakeGenerate(rates, ["ngram-k3", "suffix-k5"])
    _fake(monkeypatch, fake)
    plan = AutoPlan((("helpdesk", 16),), SETUPS, 1000, 128, 2, sweep_rows=200)
    cell = measure_cell(plan, "helpdesk", 16, tmp_path)
    names = [name for name, _ in fake.calls]
    assert names[:4] == SETUPS  # the sweep, each set-up once
    assert names[4:] == [
        "auto-rep0", "none-rep0", "ngram-k3-rep0", "ngram-k5-rep0",
        "auto-rep1", "chosen-suffix-k5-rep1", "none-rep1", "ngram-k3-rep1", "ngram-k5-rep1",
    ]  # fmt: skip
    assert list(cell.results) == ["auto", "none", "ngram-k3", "ngram-k5", "suffix-k5"]
    assert cell.sweep == pytest.approx({s: rates[s] for s in SETUPS})
    assert cell.picks == ["ngram-k3", "suffix-k5"] and cell.choice == pytest.approx(120 / 140)
    assert cell.goals()["choice"] is False


def test_from_round_runs_and_counts_only_the_rounds_from_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Round 1 measured by an older spec=auto: --from-round 2 neither runs nor reads it, and the report says so.
    (tmp_path / "auto-rep0").mkdir()
    slow = Measured("auto", Throughput(1000, 1000, 90.0, 100.0), 5.0, {"winner": "none"})
    (tmp_path / "auto-rep0" / auto_bench.MEASURED_FILE).write_text(json.dumps(slow.to_dict()))
    fake = FakeGenerate({"none": 100.0, "ngram-k3": 140.0, "auto": 138.0}, ["ngram-k3", "ngram-k3"])
    _fake(monkeypatch, fake)
    plan = AutoPlan((("helpdesk", 16),), ["none", "ngram-k3"], 1000, 128, 3, from_round=2)
    cell = measure_cell(plan, "helpdesk", 16, tmp_path)
    assert [name for name, _ in fake.calls] == [
        "auto-rep1", "none-rep1", "ngram-k3-rep1", "auto-rep2", "none-rep2", "ngram-k3-rep2",
    ]  # fmt: skip
    assert [m.figures.wall_seconds for m in cell.results["auto"]] == pytest.approx([1000 / 138] * 2)
    assert "medians of 2 round(s), 2 to 3 (the earlier ones not counted)" in report(plan, "STAMP", [cell])
    args = argparse.Namespace(
        setups="none", cells="helpdesk@16", rows=None, auto_max_tokens=64, repeats=3, sweep_rows=200, from_round=2
    )
    assert AutoPlan.from_args(args).rounds == range(1, 3)


def test_a_from_round_past_the_repeats_is_refused_before_any_job(tmp_path: Path) -> None:
    command = [sys.executable, "jobs/bench.py", "--auto", "--repeats", "2", "--from-round", "3"]
    done = subprocess.run([*command, "--output-root", str(tmp_path)], cwd=PROJECT_ROOT, capture_output=True, text=True)
    assert done.returncode == 2 and "--from-round 3: give a round from 1 to --repeats (2)" in done.stderr
    assert not any(tmp_path.iterdir()), "nothing was run"


def test_few_setups_skip_the_sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeGenerate({"none": 100.0, "ngram-k3": 140.0, "auto": 138.0}, ["ngram-k3"])
    _fake(monkeypatch, fake)
    cell = measure_cell(AutoPlan((("helpdesk", 16),), ["none", "ngram-k3"], 1000, 128, 1), "helpdesk", 16, tmp_path)
    assert [name for name, _ in fake.calls] == ["auto-rep0", "none-rep0", "ngram-k3-rep0"]
    assert cell.sweep == {} and cell.goals() == {"choice": True, "cost": True, "none": None, "best": True}
    text = report(AutoPlan((("helpdesk", 16),), ["none", "ngram-k3"], 1000, 128, 1), "STAMP", [cell])
    assert text.splitlines()[0] == "# spec=auto against the fixed set-ups (STAMP)"
    assert "1000 rows; the fixed set-ups: spec=none and the 2 fastest of a sweep on 200 rows" in text


def test_a_job_measured_before_is_read_not_run_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = Measured("auto", Throughput(32, 1000, 8.0, 10.0), 5.0, {"winner": "none"})
    (tmp_path / auto_bench.MEASURED_FILE).write_text(json.dumps(before.to_dict()))
    monkeypatch.setattr(auto_bench, "run_generate", lambda *a, **k: pytest.fail("ran the job again"))
    plan = AutoPlan((("chat", 16),), ["none"], None, 128, 1)
    assert run_one("auto", ["spec=auto"], WORKLOADS["chat"], plan, tmp_path, 16, None) == before


def test_a_job_stopped_part_way_is_measured_again_from_the_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    partial = tmp_path / "auto-rep0" / "runs" / "chat" / "part-0.parquet"
    partial.parent.mkdir(parents=True)
    partial.write_text("half a job")

    def generate(overrides: list[str], output_root: Path, run_name: str | None = None) -> None:
        assert not partial.exists(), "its wall time would cover only the rest"
        assert output_root == tmp_path / "auto-rep0" and "engine.max_num_seqs=4" in overrides
        assert "max_samples=1000" in overrides and "spec=auto" in overrides
        raise RuntimeError("stopped here")

    monkeypatch.setattr(auto_bench, "run_generate", generate)
    plan = AutoPlan((("chat", 4),), [], 1000, 128, 1)
    with pytest.raises(RuntimeError, match="stopped here"):
        run_one("auto", ["spec=auto"], WORKLOADS["chat"], plan, tmp_path / "auto-rep0", 4, 1000)


def test_in_a_shared_output_root_only_the_stopped_jobs_own_run_is_measured_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cell's jobs share history/ as output_root: a job stopped part way loses its own run folder (the bench made
    it), never another job's."""
    history = tmp_path / "history"
    runs = history / "runs" / "helpdesk" / "smollm2-135m-instruct"
    for name in ("auto-rep0-0123abcd", "sweep-ngram-k3-89abcdef", "auto-rep0-extra-0123abcd"):
        (runs / name).mkdir(parents=True)
        (runs / name / "run.json").write_text("{}")
    seen = {}

    def generate(overrides: list[str], output_root: Path, run_name: str | None = None) -> None:
        seen.update(output_root=output_root, run_name=run_name)
        raise RuntimeError("stopped here")

    monkeypatch.setattr(auto_bench, "run_generate", generate)
    plan = AutoPlan((("helpdesk", 16),), [], 1000, 128, 1)
    with pytest.raises(RuntimeError, match="stopped here"):
        run_one("auto", ["spec=auto"], WORKLOADS["helpdesk"], plan, tmp_path / "auto-rep0", 16, 1000, history)
    assert seen == {"output_root": history, "run_name": "auto-rep0"}
    assert sorted(p.name for p in runs.iterdir()) == ["auto-rep0-extra-0123abcd", "sweep-ngram-k3-89abcdef"]


def test_an_untimed_warm_up_job_runs_before_the_first_cell_outside_its_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first process after a while reads the model and libraries from disk: that goes to an untimed job, not to
    whichever set-up the invocation measures first (spec=auto's, when --stamp resumes a cell after its sweep)."""
    calls: list[tuple[str, Any]] = []

    def generate(overrides: list[str], output_root: Path, run_name: str | None = None) -> None:
        assert output_root.is_dir() and not output_root.is_relative_to(tmp_path), "never in a cell's history"
        (output_root / "made-by-the-job").write_text("")
        calls.append(("warm-up", (output_root, overrides, run_name)))

    monkeypatch.setattr(auto_bench, "run_generate", generate)
    monkeypatch.setattr(auto_bench, "measure_cell", lambda plan, workload, batch, where: calls.append(("cell", where)))
    monkeypatch.setattr(auto_bench, "report", lambda plan, stamp, cells: f"{len(cells)} cells")
    plan = AutoPlan((("helpdesk", 16), ("retrieval", 16)), SETUPS, 1000, 64, 2)
    text, path = auto_bench.auto_report(plan, tmp_path, "STAMP")
    assert [kind for kind, _ in calls] == ["warm-up", "cell", "cell"] and text == "2 cells"
    scratch, overrides, run_name = calls[0][1]
    assert not scratch.exists(), "the warm-up's folder is removed"
    assert run_name is None and "dataset=helpdesk" in overrides and "engine.max_num_seqs=16" in overrides
    assert "max_samples=32" in overrides and "sampling.max_tokens=64" in overrides and "tracking=off" in overrides


def test_a_job_measured_before_its_steps_were_kept_reads_them_from_its_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The report prices auto's steps at its choice's pace (auto_cells.Measured.paced_wall): a stamp measured before
    the steps were kept in measured.json finds them in the job's own run folder, not another job's."""
    history = tmp_path / "history"
    runs = history / "runs" / "helpdesk" / "smollm2-135m-instruct"
    for name in ("auto-rep0-0123abcd", "auto-rep0-extra-0123abcd"):
        (runs / name).mkdir(parents=True)
        (runs / name / "run.json").write_text("{}")
    steps = {"ngram-k3": {"16-31": {"steps": 20.0, "seconds": 6.0}}}

    class Shard:
        def __init__(self, folder: Path) -> None:
            self.folder = folder

        def read_summary(self) -> argparse.Namespace:
            assert self.folder.name == "auto-rep0-0123abcd", "its own run's summary"
            return argparse.Namespace(step_buckets=steps)

    monkeypatch.setattr(auto_bench, "shard_folders", lambda folder: [Shard(folder)])
    monkeypatch.setattr(auto_bench, "run_generate", lambda *a, **k: pytest.fail("ran the job again"))
    old = Measured("auto", Throughput(32, 1000, 8.0, 10.0), 5.0, {"winner": "ngram-k3"}).to_dict()
    del old["steps"]
    root = tmp_path / "auto-rep0"
    root.mkdir()
    (root / auto_bench.MEASURED_FILE).write_text(json.dumps(old))
    plan = AutoPlan((("helpdesk", 16),), [], 1000, 128, 1)
    read = run_one("auto", ["spec=auto"], WORKLOADS["helpdesk"], plan, root, 16, 1000, history)
    assert read.steps == steps and read.figures.wall_seconds == 10.0


def test_a_job_records_how_long_after_boot_it_was_launched_and_older_files_read_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first 40-60 minutes after boot ran slower here: each job keeps its launch's minutes since boot, read at
    launch (not at its end), and measured.json files written before the field read as unknown."""
    clock = iter([28.0, 41.6])
    monkeypatch.setattr(auto_bench, "minutes_since_boot", lambda: next(clock))
    steps = {"ngram-k2": {"16-31": {"steps": 20.0, "seconds": 6.0}}}
    summary = argparse.Namespace(
        rows=1000, output_tokens=36000, generation_seconds=780.0, engine_startup_seconds=6.0, step_buckets=steps
    )

    class Shard:
        def read_summary(self) -> argparse.Namespace:
            return summary

    class Folder:
        def __init__(self, folder: Path) -> None:
            pass

        def read_decision(self) -> dict:
            return {"winner": "ngram-k2"}

    def generate(overrides: list[str], output_root: Path, run_name: str | None = None) -> tuple[Path, Shard, float]:
        assert next(clock) == 41.6, "read at the job's end, not its launch"
        return output_root, Shard(), 800.0

    monkeypatch.setattr(auto_bench, "run_generate", generate)
    monkeypatch.setattr(auto_bench, "RunFolder", Folder)
    plan = AutoPlan((("helpdesk", 16),), [], 1000, 64, 1)
    measured = run_one("auto", ["spec=auto"], WORKLOADS["helpdesk"], plan, tmp_path / "auto-rep0", 16, 1000)
    assert measured.booted_minutes == 28.0
    assert run_one("auto", ["spec=auto"], WORKLOADS["helpdesk"], plan, tmp_path / "auto-rep0", 16, 1000) == measured
    old = measured.to_dict()
    del old["booted_minutes"]
    assert Measured.from_dict(old).booted_minutes is None
