"""spec=auto piloted on the likeliest set-up (specbatch.auto.likeliest) with the measured ks of its method set in its
engine in place (specbatch.auto.engines): whole shards on the dummy backend, no model. The replay's prediction is
given (the dummy's made-up tokens never repeat); everything else runs: the engines, the streams, the records."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from test_auto import _Killed, auto_job, killed_run

from conftest import compose_job
from specbatch.auto import deciding, generation
from specbatch.auto import engines as auto_engines
from specbatch.auto import likeliest as likeliest_module
from specbatch.auto.decision import Predicted, earlier_bound, measuring_gain, whole_job
from specbatch.auto.generation import AutoShardGeneration
from specbatch.backends.dummy.dummy import DummyEngine, StepCost
from specbatch.config import ConfigError
from specbatch.pipeline import run_job
from specbatch.run.folder import RunFolder


def pilot_job(root: Path, *extra: str):
    """test_auto's job, piloted on the likeliest set-up (not pinned to spec=none), two leaders measured."""
    return auto_job(root, "spec.auto.pilot=null", "spec.auto.candidates=[none,ngram-k2,ngram-k5,suffix-k5]", *extra)


def _predicted(monkeypatch, **speedups: float) -> None:
    """Replay predicts these speedups over spec=none (label with _ for -), fastest first."""
    ranked = sorted(speedups.items(), key=lambda item: -item[1])
    made = [Predicted(label.replace("_", "-"), 2.0, 2.0, 2.0, s) for label, s in ranked]
    monkeypatch.setattr(deciding, "predict", lambda *args: list(made))


def _starts(monkeypatch) -> list[str]:
    """The set-up of every engine started, as its first k (a roomy engine starts with a schedule)."""
    started: list[str] = []
    real = auto_engines.start_engine

    def start(job):
        spec = job.spec
        started.append(f"{spec.method.value}-k{spec.k_schedule[0][2]}" if spec.k_schedule else spec.label)
        return real(job)

    monkeypatch.setattr(auto_engines, "start_engine", start)
    return started


def _setups(folder: RunFolder) -> list[str]:
    return [folder.read_part_stats(n)["setup"] for n in folder.part_numbers()]


def _every_row_once(folder: RunFolder, rows: int) -> None:
    out = [row for part in folder.parts() for row in pq.read_table(part).to_pylist()]
    assert len(out) == rows == len({r["row_id"] for r in out})
    for number, part in zip(folder.part_numbers(), folder.parts(), strict=True):
        rows = pq.read_table(part).to_pylist()
        labels = {
            r["method"] if r["num_speculative_tokens"] is None else f"{r['method']}-k{r['num_speculative_tokens']}"
            for r in rows
        }
        assert labels == {folder.read_part_stats(number)["setup"]}, "each row names the set-up that made it"


def test_a_pilot_whose_set_up_wins_keeps_its_engine(tmp_path: Path, monkeypatch) -> None:
    """Without earlier runs the pilot is n-gram (the first that changes k in place); its other k is measured in the
    same engine, none is predicted out of reach, so whichever k wins the run starts one engine."""
    _predicted(monkeypatch, ngram_k5=2.0, ngram_k2=1.6, suffix_k5=1.0)
    # Steps that take time, so that the engine's step log has something to fit the costs on.
    monkeypatch.setattr(DummyEngine, "start_step_cost", StepCost(0.002, 0.0005, 0.0005))
    started = _starts(monkeypatch)
    free: list[list[str]] = []
    real_decide = deciding.decide

    def decide(rates, pilot, in_pilots_engine=()):
        free.append(sorted(in_pilots_engine))
        return real_decide(rates, pilot, in_pilots_engine)

    monkeypatch.setattr(deciding, "decide", decide)
    # 120 rows: enough left after the pilot's 6 that the prediction's error over the rest outweighs k 5's slices.
    result = run_job(pilot_job(tmp_path, "max_samples=120"))
    folder = result.folder
    pilot = folder.read_auto_pilot()
    assert pilot["label"] == "ngram-k2" and pilot["source"].startswith("prior: ")
    plan = json.loads(folder.auto_plan_path.read_text())
    assert plan["pilot"] == "ngram-k2" and plan["measure"] == ["ngram-k5"]
    assert any(note.startswith("spec=none is not measured") for note in plan["not_measured"])
    decision = json.loads(folder.decision_path.read_text())
    assert decision["measured"] and decision["winner"] in ("ngram-k2", "ngram-k5")
    setups = _setups(folder)
    assert setups[:6] == ["ngram-k2"] * 3 + ["ngram-k5"] * 3 and set(setups[6:]) == {decision["winner"]}
    assert started == ["ngram-k2"], "one engine start in the run"
    assert free == [["ngram-k2", "ngram-k5"]], "k 5 ran in the pilot's engine: losing a tie to it saves no switch"
    # The costs the choice used, measured in the pilot's engine (spec=none's own steps never timed).
    assert "steps of a speculative engine timed here" in decision["costs"]["speculative_source"]
    assert "spec=none's own steps not timed" in decision["costs"]["plain_source"]
    _every_row_once(folder, 120)


def test_none_is_measured_only_where_it_could_win(tmp_path: Path, monkeypatch) -> None:
    """Nothing is predicted 1.1x spec=none, and none could gain more than measuring it costs: it is measured, in
    its own engine. k 5, predicted a little below the pilot's k 2, could not gain what its slices cost."""
    _predicted(monkeypatch, ngram_k2=0.8, ngram_k5=0.78, suffix_k5=0.7)
    started = _starts(monkeypatch)
    result = run_job(pilot_job(tmp_path))
    plan = json.loads(result.folder.auto_plan_path.read_text())
    assert plan["measure"] == ["none"]
    assert any(note.startswith("ngram-k5 is not measured: at most") for note in plan["not_measured"])
    decision = json.loads(result.folder.decision_path.read_text())
    assert started[:2] == ["ngram-k2", "none"] and len(started) == (2 if decision["winner"] == "none" else 3)
    assert decision["candidates"][0]["setup"] == "none" and decision["candidates"][0]["measured_tok_s"]
    _every_row_once(result.folder, 40)


def _force_unmeasured(monkeypatch, winner: str) -> None:
    monkeypatch.setattr(deciding, "unmeasured_winner", lambda predicted: (winner, "forced by the test"))
    monkeypatch.setattr(generation.AutoShardGeneration, "_per_occupancy", lambda self, folder, plan: None)


@pytest.mark.parametrize("winner", ["ngram-k2", "ngram-k5", "suffix-k5"])
def test_unmeasured_the_pilot_heads_its_own_stream_and_hands_over_only_to_another_set_up(
    winner: str, tmp_path: Path, monkeypatch
) -> None:
    """Nothing measured (budget 0): the pilot is the first chunk of an n-gram stream of the shard. If it wins the
    stream goes on (one stream, one engine); another k of n-gram takes the rest in the same engine; suffix
    decoding needs an engine of its own."""
    _force_unmeasured(monkeypatch, winner)
    started = _starts(monkeypatch)
    job = pilot_job(tmp_path, "spec.auto.budget=0", "engine.max_num_seqs=2")
    folder = run_job(job).folder
    setups = _setups(folder)
    launches = [folder.read_part_stats(n)["launch"] for n in folder.part_numbers()]
    assert setups[0] == "ngram-k2" and setups[-1] == winner
    if winner == "ngram-k2":
        assert set(setups) == {"ngram-k2"} and len(set(launches)) == 1 and started == ["ngram-k2"]
    else:
        handed = setups.index(winner)
        assert set(setups[:handed]) == {"ngram-k2"} and set(setups[handed:]) == {winner}
        assert started == (["ngram-k2"] if winner == "ngram-k5" else ["ngram-k2", "suffix-k5"])
    _every_row_once(folder, 40)


@pytest.mark.parametrize("phase", ["pilot", "rest"])
def test_a_resumed_shard_neither_re_pilots_nor_switches_twice(phase: str, tmp_path: Path, monkeypatch) -> None:
    """Killed in its pilot (two of three slices written), or in the winner's stream after the decision; meanwhile
    a faster fixed run of another candidate appeared beside it. The rerun pilots on the set-up it recorded, keeps
    every part written, and starts the engine of the one decision only."""
    _predicted(monkeypatch, suffix_k5=1.8, ngram_k2=1.6, ngram_k5=1.5)
    free: list[list[str]] = []
    if phase == "rest":

        def forced(rates, pilot, in_pilots_engine=()):
            free.append(sorted(in_pilots_engine))
            return "suffix-k5", "forced by the test", {}

        monkeypatch.setattr(deciding, "decide", forced)
    job = pilot_job(tmp_path)
    real_stream = AutoShardGeneration._stream
    calls = []
    # After the pilot's second slice is written; or as the winner's stream of the rest begins (3 pilot slices and 3
    # of suffix-k5, the one leader of another engine, came before).
    kill_after, kill_before = {"pilot": (2, None), "rest": (None, 7)}[phase]

    def stream(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == kill_before:
            raise _Killed(phase)
        real_stream(self, *args, **kwargs)
        if len(calls) == kill_after:
            raise _Killed(phase)

    monkeypatch.setattr(AutoShardGeneration, "_stream", stream)
    folder, before = killed_run(job)
    decided = folder.decision_path.read_text() if folder.decision_path.exists() else None
    assert folder.read_auto_pilot()["label"] == "ngram-k2"
    # An earlier run of the same kind, faster than anything: a fresh shard would pilot on it.
    run_job(
        compose_job(
            [
                f"output_root={tmp_path}",
                "engine.backend=dummy",
                "tracking=off",
                "max_samples=8",
                "spec=ngram",
                "spec.num_speculative_tokens=5",
            ]
        )
    )
    monkeypatch.setattr(likeliest_module, "_rate", lambda root: 10_000.0)
    assert likeliest_module.likeliest(job, generation.candidates(job)).label == "ngram-k5"
    monkeypatch.setattr(AutoShardGeneration, "_stream", real_stream)
    started = _starts(monkeypatch)
    result = run_job(job)
    assert folder.read_auto_pilot()["label"] == "ngram-k2", "not piloted again on the new likeliest"
    assert {n: folder.read_part_stats(n)["launch"] for n in before} == before, "no written part made again"
    decision = json.loads(folder.decision_path.read_text())
    if decided is not None:
        assert folder.decision_path.read_text() == decided
    setups = _setups(folder)
    assert setups[:3] == ["ngram-k2"] * 3 and set(setups[6:]) == {decision["winner"]}
    assert setups[3:6] == ["suffix-k5"] * 3
    # The pilot's last slice, then suffix-k5's engine, kept if it wins; or the winner's engine alone.
    if phase == "pilot":
        assert started == ["ngram-k2", "suffix-k5"] + (["ngram-k2"] if decision["winner"] == "ngram-k2" else [])
    else:
        assert started == ["suffix-k5"] and decision["winner"] == "suffix-k5"
        # Only the pilot's own set-up runs in its engine: suffix-k5 needs its own, so a tie would keep the pilot.
        assert free == [["ngram-k2"]]
    _every_row_once(result.folder, 40)


def test_a_learned_drafter_is_measured_in_its_own_engine_unless_an_earlier_run_rules_it_out(
    tmp_path: Path, monkeypatch
) -> None:
    head = tmp_path / "head"
    head.mkdir()
    (head / "config.json").write_text(json.dumps({"vocab_size": 49152}))
    learned = [f"+spec.auto.checkpoints.eagle3.model={head}", "spec.auto.candidates=[none,ngram-k2,eagle3-k3]"]
    _predicted(monkeypatch, ngram_k2=1.6)
    started = _starts(monkeypatch)
    folder = run_job(pilot_job(tmp_path, *learned)).folder
    plan = json.loads(folder.auto_plan_path.read_text())
    assert plan["pilot"] == "ngram-k2" and plan["measure"] == ["eagle3-k3"]
    decision = json.loads(folder.decision_path.read_text())
    by_setup = {row["setup"]: row for row in decision["candidates"]}
    assert len(by_setup["eagle3-k3"]["slices_tok_s"]) == 3 and by_setup["eagle3-k3"]["measured_tok_s"]
    assert started[:2] == ["ngram-k2", "eagle3-k3"]
    # Earlier fixed runs of this kind: the head made half n-gram's tok/s, beyond the error: not measured again.
    roots = {}
    for spec in (["spec=ngram", "spec.num_speculative_tokens=2"], ["spec=eagle3", f"spec.model={head}"]):
        fixed = run_job(
            compose_job([f"output_root={tmp_path}", "engine.backend=dummy", "tracking=off", "max_samples=8", *spec])
        )
        roots[fixed.folder.root] = 100.0 if "spec=ngram" in spec else 50.0
    monkeypatch.setattr(likeliest_module, "_rate", lambda root: roots.get(root))
    again = run_job(pilot_job(tmp_path, *learned, "run_name=again")).folder
    plan = json.loads(again.auto_plan_path.read_text())
    assert plan["measure"] == [] and any(
        n.startswith("eagle3-k3 is not measured: earlier runs of this kind") for n in plan["not_measured"]
    )
    # Piloted on the first auto run's winner, the likeliest once there is one.
    assert again.read_auto_pilot()["source"].startswith("the decision of the earlier spec=auto run")


def test_a_pilot_that_is_not_a_candidate_is_refused_before_anything_loads(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"spec.auto.pilot=ngram-k7 is not among spec.auto.candidates"):
        run_job(pilot_job(tmp_path, "spec.auto.pilot=ngram-k7"))
    assert not (tmp_path / "runs").exists()


def _choices(monkeypatch, *winners: str) -> list[str]:
    """The unmeasured choice names ``winners`` in turn (the decision's, then the revision's), the last one after."""
    made: list[str] = []

    def choose(predicted):
        made.append(winners[min(len(made), len(winners) - 1)])
        return made[-1], "forced by the test"

    monkeypatch.setattr(deciding, "unmeasured_winner", choose)
    monkeypatch.setattr(generation.AutoShardGeneration, "_per_occupancy", lambda self, folder, plan: None)
    return made


@pytest.mark.parametrize("revised", ["ngram-k5", "suffix-k5"])
def test_an_unmeasured_choice_is_revised_once_from_more_rows_in_its_engine(
    revised: str, tmp_path: Path, monkeypatch
) -> None:
    """The pilot's n-gram k 2 wins and its stream goes on; once a quarter of the shard is written the prediction is
    made again on every row written. k 5 of the same engine takes the rest in place; suffix decoding, which would
    need an engine start-up, does not."""
    made = _choices(monkeypatch, "ngram-k2", revised)
    started = _starts(monkeypatch)
    folder = run_job(pilot_job(tmp_path, "spec.auto.budget=0", "engine.max_num_seqs=2")).folder
    assert made == ["ngram-k2", revised], "decided once, revised once"
    setups = _setups(folder)
    if revised == "ngram-k5":
        record = folder.read_auto_revised()
        assert record["winner"] == "ngram-k5" and record["replaces"] == "ngram-k2" and record["rows"] >= 10
        handed = setups.index("ngram-k5")
        assert set(setups[:handed]) == {"ngram-k2"} and set(setups[handed:]) == {"ngram-k5"}
    else:
        assert folder.read_auto_revised() is None and set(setups) == {"ngram-k2"}
    assert started == ["ngram-k2"], "a revision never costs a start-up"
    _every_row_once(folder, 40)


@pytest.mark.parametrize("winner", ["none", "suffix-k5"])
def test_a_choice_whose_engine_runs_nothing_else_in_place_is_not_revised(
    winner: str, tmp_path: Path, monkeypatch
) -> None:
    """The full-batch help-desk cell's case: the unmeasured choice is spec=none (or suffix decoding, one k per
    engine), whose engine runs no other set-up, and a revision never starts one; so no replay of a quarter of the
    shard holds its stream up."""
    made = _choices(monkeypatch, winner, "ngram-k2")
    started = _starts(monkeypatch)
    job = pilot_job(tmp_path, "spec.auto.pilot=none", "spec.auto.budget=0", "engine.max_num_seqs=2")
    folder = run_job(job).folder
    assert made == [winner], "decided once, never revised"
    assert folder.read_auto_revised() is None and set(_setups(folder)) == {"none"} | {winner}
    assert started == list(dict.fromkeys(["none", winner]))
    _every_row_once(folder, 40)


def test_a_resumed_shard_keeps_its_revision_and_does_not_revise_again(tmp_path: Path, monkeypatch) -> None:
    made = _choices(monkeypatch, "ngram-k2", "ngram-k5")
    real_stream = AutoShardGeneration._stream
    calls = []

    def stream(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # the revised set-up's stream of the rest
            raise _Killed("after the revision")
        return real_stream(self, *args, **kwargs)

    monkeypatch.setattr(AutoShardGeneration, "_stream", stream)
    job = pilot_job(tmp_path, "spec.auto.budget=0", "engine.max_num_seqs=2")
    folder, before = killed_run(job)
    revised = folder.auto_revised_path.read_text()
    monkeypatch.setattr(AutoShardGeneration, "_stream", real_stream)
    started = _starts(monkeypatch)
    run_job(job)
    assert made == ["ngram-k2", "ngram-k5"] and folder.auto_revised_path.read_text() == revised
    assert {n: folder.read_part_stats(n)["launch"] for n in before} == before
    assert started == ["ngram-k5"] and _setups(folder)[len(before) :] == ["ngram-k5"] * (
        len(_setups(folder)) - len(before)
    )
    _every_row_once(folder, 40)


def test_measuring_pays_only_where_what_it_could_gain_beats_what_it_costs() -> None:
    """The help-desk cell at batch 16 (about 200 s of rest, engine start-ups of 4.5 s, slices costing 4.8 s): suffix
    decoding predicted within a hair of the pilot's n-gram could gain at most 10 s, less than its two start-ups and
    its slices; on a job ten times as long it is worth measuring."""
    cost = 2 * 4.5 + 4.8
    why_not = measuring_gain(200.0, 0.987, 0.992, 1.05, cost)
    assert why_not is not None and "at most 10.5 s to gain" in why_not and "13.8 s measuring it costs" in why_not
    assert measuring_gain(2000.0, 0.987, 0.992, 1.05, cost) is None
    assert measuring_gain(2000.0, 1.2, 0.9, 1.05, 0.0) is not None, "predicted below the pilot even at its best"


def test_a_decode_speedup_is_weighed_as_the_whole_job_s() -> None:
    """The retrieval cell at batch 16 (about 530 prompt tokens a row, 36 new ones): the prompts take 0.55 of
    spec=none's time, so suffix decoding's predicted 1.41x on decoding is 1.15x of the job, n-gram k 3's 1.29x is
    1.11x. The order is kept, and the decoding's figure stays in the record."""
    decoding = [Predicted("suffix-k5", 2.1, 2.2, 1.9, 1.41), Predicted("ngram-k3", 2.5, 2.8, 2.0, 1.29)]
    whole = whole_job(decoding, 0.55)
    assert [p.label for p in whole] == ["suffix-k5", "ngram-k3"]
    assert whole[0].speedup == pytest.approx(1 / (0.55 + 0.45 / 1.41)) and 1.14 < whole[0].speedup < 1.16
    assert whole[1].speedup == pytest.approx(1 / (0.55 + 0.45 / 1.29))
    assert whole[0].to_dict()["predicted_decode_speedup"] == 1.41 and "predicted_decode_speedup" not in (
        decoding[0].to_dict()
    )
    assert whole_job(decoding, 0.0)[0].speedup == pytest.approx(1.41), "no prompt time: the decoding's own"


def test_earlier_runs_of_this_kind_bound_a_prediction() -> None:
    """Earlier fixed runs measured suffix decoding at 0.99x n-gram k 3's tok/s, the pilot predicted 1.11x: suffix's
    1.15x is bounded to 1.10x, and no more than a measured whole run says; without both runs, the prediction."""
    earlier = {"suffix-k5": (111.8, 112.9), "none": (113.5, 112.9)}  # each beside n-gram k 3's runs
    bounded, said = earlier_bound("suffix-k5", 1.15, "ngram-k3", 1.11, earlier)
    assert bounded == pytest.approx(1.11 * 111.8 / 112.9) and "bounded to 1.10x by earlier runs" in said
    assert "(suffix-k5 111.8 tok/s, ngram-k3 112.9)" in said
    assert earlier_bound("suffix-k5", 1.05, "ngram-k3", 1.11, earlier) == (1.05, ""), "already below: kept"
    assert earlier_bound("ngram-k5", 1.15, "ngram-k3", 1.11, earlier) == (1.15, ""), "no earlier run of it"


def test_a_leader_that_earlier_runs_measured_at_the_pilot_s_pace_is_not_measured(tmp_path: Path, monkeypatch) -> None:
    """Suffix decoding is predicted well ahead of the pilot's n-gram k 2 and, with no earlier run, measured in its own
    engine. Once earlier fixed runs of this kind made it 0.99x n-gram k 2's tok/s, what measuring it could gain is
    bounded by theirs: less than its start-ups and slices cost, so it is not measured and the plan says why; and the
    choice made without measuring does not switch to it."""
    _predicted(monkeypatch, suffix_k5=1.8, ngram_k2=1.6, ngram_k5=1.5)
    first = run_job(pilot_job(tmp_path)).folder
    assert json.loads(first.auto_plan_path.read_text())["measure"] == ["suffix-k5"]
    roots = {}
    for spec, rate in ((["spec=ngram", "spec.num_speculative_tokens=2"], 100.0), (["spec=suffix"], 99.0)):
        fixed = run_job(
            compose_job([f"output_root={tmp_path}", "engine.backend=dummy", "tracking=off", "max_samples=8", *spec])
        )
        roots[fixed.folder.root] = rate
    monkeypatch.setattr(likeliest_module, "_rate", lambda root: roots.get(root))
    again = run_job(pilot_job(tmp_path, "run_name=again")).folder
    plan = json.loads(again.auto_plan_path.read_text())
    assert plan["pilot"] == "ngram-k2" and "suffix-k5" not in plan["measure"]
    note = next(n for n in plan["not_measured"] if n.startswith("suffix-k5 is not measured"))
    assert "bounded to" in note and "by earlier runs of this kind (suffix-k5 99.0 tok/s, ngram-k2 100.0)" in note
    assert "no error in its favour" in note, "whole runs measured it: the prediction's error does not apply"
    # Nor does the unmeasured choice switch to it: the step model alone does not overrule whole runs.
    assert plan["slower_before"] == ["suffix-k5"]
    decision = json.loads(again.decision_path.read_text())
    assert not decision["measured"] and not decision["winner"].startswith("suffix")
    assert set(_setups(again)) == {"ngram-k2"} | ({decision["winner"]} if decision["winner"] != "none" else set())


def test_when_earlier_runs_leave_nothing_to_measure_the_pilot_heads_one_stream(tmp_path: Path, monkeypatch) -> None:
    """Earlier fixed runs of this kind measured every candidate, none faster than n-gram k 2, which pilots: the
    shard knows before its pilot that it will measure nothing, so the pilot's slices head one ordinary stream (none
    is drained on its own), and auto-pilot.json says so. Killed once its plan is due, and the earlier runs changed
    meanwhile (n-gram k 5's is gone, so a fresh shard would measure it), the resumed shard keeps that way."""
    _predicted(monkeypatch, suffix_k5=1.8, ngram_k2=1.6, ngram_k5=1.5)
    monkeypatch.setattr(DummyEngine, "start_step_cost", StepCost(0.002, 0.0005, 0.0005))
    roots = {}
    for spec, rate in (
        (["spec=none"], 90.0),
        (["spec=ngram", "spec.num_speculative_tokens=2"], 100.0),
        (["spec=ngram", "spec.num_speculative_tokens=5"], 97.0),
        (["spec=suffix"], 99.0),
    ):
        fixed = run_job(
            compose_job(
                [f"output_root={tmp_path}", "engine.backend=dummy", "tracking=off", "max_samples=8"]
                + ["engine.max_num_seqs=2", *spec]
            )
        )
        roots[fixed.folder.root] = rate
    monkeypatch.setattr(likeliest_module, "_rate", lambda root: roots.get(root))
    job = pilot_job(tmp_path, "engine.max_num_seqs=2")
    streams: list[int] = []
    real_stream, real_plan = AutoShardGeneration._stream, AutoShardGeneration._plan

    def stream(self, *args, **kwargs):
        streams.append(len(args[2]))  # the chunks of this stream
        return real_stream(self, *args, **kwargs)

    def killed_at_plan(self, folder):
        raise _Killed("plan")

    monkeypatch.setattr(AutoShardGeneration, "_stream", stream)
    monkeypatch.setattr(AutoShardGeneration, "_plan", killed_at_plan)
    folder, before = killed_run(job)
    pilot = folder.read_auto_pilot()
    assert pilot["label"] == "ngram-k2" and "nothing is left to measure" in pilot["streamed"]
    assert len(streams) == 1 and streams[0] > 3, "the pilot's three slices head one stream of the shard"
    assert all(folder.part_path(n).exists() for n in range(3)) and set(_setups(folder)) == {"ngram-k2"}
    roots = {root: rate for root, rate in roots.items() if "ngram-k5" not in root.name}
    monkeypatch.setattr(generation, "nothing_to_measure", lambda *args: pytest.fail("asked again"))
    monkeypatch.setattr(AutoShardGeneration, "_plan", real_plan)
    started, streams[:] = _starts(monkeypatch), []
    run_job(job)
    assert {n: folder.read_part_stats(n)["launch"] for n in before} == before, "no written part made again"
    plan = json.loads(folder.auto_plan_path.read_text())
    assert plan["measure"] == [] and not plan["measuring"] and plan["why"] == pilot["streamed"]
    assert plan["slower_before"] == ["none", "suffix-k5"], "the plan reads the earlier runs there are now"
    decision = json.loads(folder.decision_path.read_text())
    assert not decision["measured"] and decision["winner"].startswith("ngram")
    assert len(streams) == 1 and started == ["ngram-k2"], "the rest in the one stream, in the pilot's engine"
    _every_row_once(folder, 40)
