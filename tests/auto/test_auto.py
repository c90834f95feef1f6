"""spec=auto without a model: its config and refusals, the decision's arithmetic, and whole shards on the dummy
backend (pilot, plan, measurements, decision, rest; kills in each phase; shards reading one decision; a damaged
decision or plan named by status, compare and resume, and made again once removed)."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import runpy
import shlex
import signal
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from conftest import PROJECT_ROOT, compose_config, compose_job
from specbatch.analysis.compare import CompareError, compare
from specbatch.analysis.report import _load_runs
from specbatch.analysis.run_data import load_run
from specbatch.auto import deciding, generation
from specbatch.auto import engines as auto_engines
from specbatch.auto.candidates import candidates
from specbatch.auto.cutting import spread
from specbatch.auto.decision import (
    Predicted,
    around_pilot,
    decide,
    measured_slots,
    measuring_pays,
    predict,
    unmeasured_winner,
)
from specbatch.auto.generation import AutoShardGeneration
from specbatch.backends.dummy.dummy import DummyEngine
from specbatch.common.interrupts import StopRequested, forget_stop, stop_signals_raise
from specbatch.config import ConfigError, sample_seed, to_job_config
from specbatch.pipeline import run_job
from specbatch.prediction.turns import ReplayTurn
from specbatch.run.folder import RunFolder
from specbatch.run.integrity import PartRecord
from specbatch.run.profile_schema import schema_problems
from specbatch.run.records.output_parts import SCHEMA_VERSION_KEY
from specbatch.run.records.profile_file import read_profile
from specbatch.run.status_merge import merge_shards
from specbatch.run.streaming import ChunkStreamer

CONF = Path(__file__).resolve().parents[2] / "conf"


@pytest.fixture(autouse=True)
def leaders_could_win(monkeypatch):
    """The dummy's made-up tokens never repeat, so replay predicts no candidate faster than spec=none, and a leader
    that could gain nothing is not measured (decision.around_pilot): predicted 1.05x here (below the unmeasured
    pick's 1.1x), so that these shards measure their leaders."""
    real = deciding.predict

    def predict(*args, **kwargs):
        return [dataclasses.replace(p, speedup=max(p.speedup, 1.05)) for p in real(*args, **kwargs)]

    monkeypatch.setattr(deciding, "predict", predict)


def auto_job(root: Path, *extra: str):
    return compose_job(
        [
            f"output_root={root}",
            "spec=auto",
            "engine.backend=dummy",
            "tracking=off",
            "max_samples=40",
            "spec.auto.pilot_rows=6",
            # Slices of 2 rows (the dummy's batch is 256): measuring fits when choosing may take half the rows.
            "spec.auto.slice_rows=2",
            "spec.auto.budget=0.5",
            "chunk_size=8",
            # The pilot on spec=none, as these tests' phases expect; the ones of the likeliest set-up set it null.
            "spec.auto.pilot=none",
            *extra,
        ]
    )


# --- config and refusals ---


def composed(overrides: list[str]):
    """The config as jobs/generate.py converts it, before the backend's checks (which run_job makes)."""
    return to_job_config(compose_config(overrides))


def test_defaults_list_the_checkpoint_free_set_ups_and_the_models_own_checkpoints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A cache without the embedded head (auto weighs it once built: tests/drafter/test_embedded_head.py).
    monkeypatch.setenv("SPECBATCH_CACHE", str(tmp_path))
    job = compose_job(["spec=auto"])
    assert [c.label for c in candidates(job)] == [
        "none",
        "ngram-k1",
        "ngram-k2",
        "ngram-k3",
        "ngram-k5",
        "ngram-k8",
        "suffix-k5",
    ]
    tiny = compose_job(["spec=auto", "model=tiny_llama"])
    labels = [c.label for c in candidates(tiny)]
    assert labels[-3:] == ["draft_model-k3", "eagle-k3", "eagle3-k3"]
    assert tiny.spec.label == "auto" and tiny.spec.k is None


@pytest.mark.parametrize("model", ["tiny_llama", "llama31_8b_instruct"])
def test_auto_pairings_agree_with_the_fixed_pairings(model: str) -> None:
    """model_spec/<model>_auto.yaml repeats each <model>_<method>.yaml: a candidate runs what spec=<method> runs."""
    auto = compose_job(["spec=auto", f"model={model}"])
    for candidate in candidates(auto):
        if candidate.method.value not in ("draft_model", "eagle", "eagle3"):
            continue
        fixed = to_job_config(compose_config([f"spec={candidate.method.value}", f"model={model}"])).spec
        assert candidate.spec == fixed, candidate.label


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("spec.auto.candidates=[none,ngram-3]", "'ngram-3' is not a set-up"),
        ("spec.auto.candidates=[none,eagle-k3]", "spec.auto.checkpoints.eagle.model"),
        ("spec.auto.candidates=[none,ngram-k40]", "spec.auto.candidates: ngram-k40: spec.num_speculative_tokens=40"),
        ("spec.num_speculative_tokens=3", "spec.auto.candidates, e.g."),
        ("spec.auto.repeats=0", "spec.auto.repeats=0"),
        ("spec.auto.budget=2", "spec.auto.budget=2"),
    ],
)
def test_bad_knobs_are_refused_naming_the_key(override: str, named: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=None) as caught:
        job = auto_job(tmp_path, override)
        AutoShardGeneration(job)
    assert named in str(caught.value)


def test_a_server_cannot_switch_set_ups_and_says_what_to_serve(tmp_path: Path) -> None:
    job = composed(
        [
            f"output_root={tmp_path}",
            "spec=auto",
            "engine.backend=server",
            "engine.url=http://127.0.0.1:9",
            "tracking=off",
        ]
    )
    with pytest.raises(ConfigError, match="fixed by whoever started it.*jobs/serve.py --print"):
        run_job(job)
    assert not (tmp_path / "runs").exists(), "refused before anything is written"


def test_methods_llama_cpp_lacks_are_named_before_anything_loads(tmp_path: Path) -> None:
    job = composed([f"output_root={tmp_path}", "spec=auto", "engine.backend=llama_cpp", "tracking=off"])
    with pytest.raises(ConfigError) as caught:
        run_job(job)
    assert "suffix-k5" in str(caught.value) and "spec.auto.candidates" in str(caught.value)
    assert not (tmp_path / "runs").exists()


def test_one_set_up_spelled_several_ways_is_one_candidate(tmp_path: Path, caplog) -> None:
    job = auto_job(tmp_path, "spec.auto.candidates=[ngram,none,ngram-k3,ngram-k03,suffix-k5]")
    assert [c.label for c in candidates(job)] == ["none", "ngram-k3", "suffix-k5"]
    assert measured_slots(candidates(job), 8) == 2
    with caplog.at_level(logging.INFO, logger="specbatch.auto.generation"):
        AutoShardGeneration(job)
    assert "spec.auto.candidates: ngram, ngram-k3, ngram-k03 are one set-up, ngram-k3" in caplog.text


def test_the_winners_overrides_are_shell_words_that_compose_the_same_set_up(tmp_path: Path) -> None:
    """decision.json's overrides go to python jobs/serve.py --print <overrides>: a checkpoint path with a space (or
    a comma, which Hydra would read as a sweep) is one shell word, and Hydra reads back the same path."""
    head = "/my heads/eagle3, v2"
    job = composed(
        [
            f"output_root={tmp_path}",
            "spec=auto",
            f"+spec.auto.checkpoints.eagle3.model='{head}'",
            "spec.auto.candidates=[none,eagle3-k3]",
        ]
    )
    (eagle3,) = [c for c in candidates(job) if c.label == "eagle3-k3"]
    words = shlex.split(eagle3.overrides)
    assert words == ["spec=eagle3", "spec.num_speculative_tokens=3", f'spec.model="{head}"']
    served = composed(words)
    assert served.spec.label == "eagle3-k3" and served.spec.model == head


# --- the decision's arithmetic ---


def test_the_fastest_wins_when_its_lead_is_beyond_the_noise() -> None:
    winner, why, figures = decide({"none": [100, 102, 98], "ngram-k3": [150, 152, 149], "ngram-k5": [170, 171, 169]})
    assert winner == "ngram-k5" and "measured fastest" in why
    assert figures["none"]["speedup"] == 1.0 and figures["ngram-k5"]["speedup"] == pytest.approx(1.7)


def test_within_noise_the_smaller_k_or_none_wins() -> None:
    # k=5 is 3 % ahead of k=3, and k=3's slices move by more than that: the smaller k.
    winner, why, _ = decide({"none": [100, 100, 100], "ngram-k3": [150, 140, 160], "ngram-k5": [153, 150, 156]})
    assert winner == "ngram-k3" and "within its noise" in why
    # Speculation 2 % ahead of none, none moving by 10 %: none.
    winner, _, _ = decide({"none": [100, 90, 110], "ngram-k3": [102, 101, 103]})
    assert winner == "none"


def test_the_pilot_wins_a_tie_only_where_losing_it_would_cost_a_switch() -> None:
    # The pilot k 8 against k 5, 4 % ahead and within its slices' noise (the bench's HumanEval-edit cell at batch 16).
    rates = {"ngram-k8": [100, 100, 100], "ngram-k5": [104, 92, 116]}
    # k 5 needs an engine of its own: staying saves the switch.
    winner, why, _ = decide(rates, "ngram-k8")
    assert winner == "ngram-k8" and "the pilot's set-up, which needs no switch, wins a tie" in why
    # The pilot's engine runs k 5 with its k set in place: nothing to save, so the measured lead stands.
    winner, why, figures = decide(rates, "ngram-k8", ["ngram-k8", "ngram-k5"])
    assert winner == "ngram-k5" and "measured fastest: 1.04x the pilot's ngram-k8" in why
    assert figures["ngram-k5"]["against"] == "ngram-k8"
    # spec=none within the noise still wins its tie (pick's rule), in place or not.
    winner, _, _ = decide({"none": [100, 90, 110], "ngram-k8": [102, 101, 103]}, "ngram-k8", ["ngram-k8"])
    assert winner == "none"


def test_slices_that_generated_no_tokens_are_not_divided_by() -> None:
    """0 tok/s is a slice whose rows all failed: it timed nothing. A pilot of such slices leaves no rate to take a
    speedup against (none, saying so); a set-up of such slices is unmeasured; a lone one is left out."""
    winner, why, figures = decide({"none": [0.0, 0.0, 0.0], "ngram-k3": [150, 152, 149]})
    assert winner == "none" and "pilot's slices generated no tokens" in why and figures == {}
    winner, why, figures = decide({"none": [100, 102, 98], "ngram-k3": [0.0, 0.0, 0.0], "ngram-k5": [170, 171, 169]})
    assert winner == "ngram-k5" and "ngram-k3's slices generated no tokens: not measured, it cannot win" in why
    assert "ngram-k3" not in figures
    winner, why, figures = decide({"none": [0.0, 100, 100], "ngram-k3": [150, 150, 150]})
    assert winner == "ngram-k3" and figures["ngram-k3"]["speedup"] == pytest.approx(1.5)
    assert "1 of none's 3 slices generated no tokens and are left out" in why and figures["none"]["repeats"] == 2
    # Nothing to replay either: no prediction, and the unmeasured pick is none.
    assert predict([], candidates(compose_job(["spec=auto"])), 2048, 4) == []
    assert unmeasured_winner([])[0] == "none"


def test_measuring_pays_only_within_the_budget() -> None:
    # 2 start-ups of 30 s against 1 000 rows at 10 s per 50 rows (230 s): 26 % > 25 %.
    pays, why = measuring_pays(2, 30.0, 10.0, 50, 1000, 0.25)
    assert not pays and "exceeds spec.auto.budget=0.25" in why
    pays, _ = measuring_pays(2, 30.0, 10.0, 50, 10_000, 0.25)
    assert pays


def _turn(row: str, prompt: list[int], completion: list[int]) -> ReplayTurn:
    return ReplayTurn(row, 1, 0, None, np.asarray(prompt), np.asarray(completion), (0, 0, 0), (0, 0, 0), "stop")


def test_prediction_ranks_what_copies_the_prompt_first(tmp_path: Path) -> None:
    """Completions that copy their prompt: n-gram predicts long acceptance and ranks above a plain baseline."""
    job = auto_job(tmp_path, "spec.auto.candidates=[none,ngram-k1,ngram-k5]")
    code = list(range(100, 160))
    turns = [_turn(f"r{i}", [1, 2, *code], [*code[:40], 7]) for i in range(4)]
    predicted = predict(turns, candidates(job), 2048, 4)
    assert [p.label for p in predicted] == ["ngram-k5", "ngram-k1"]
    assert predicted[0].acceptance_length > 3 and predicted[0].speedup > 1
    none, *_ = candidates(job)
    assert around_pilot(none, candidates(job), predicted, 1, 1, lambda label: False, {})[0] == ["ngram-k5"]
    assert unmeasured_winner([(p.label, p.speedup) for p in predicted])[0] == "ngram-k5"
    assert unmeasured_winner([("ngram-k1", 0.8)])[0] == "none"


# --- whole shards on the dummy backend ---


def _rows(folder: RunFolder) -> list[dict]:
    return [row for part in folder.parts() for row in pq.read_table(part).to_pylist()]


def _setups(folder: RunFolder) -> dict[int, str]:
    return {n: folder.read_part_stats(n)["setup"] for n in folder.part_numbers()}


def _label(row: dict) -> str:
    k = row["num_speculative_tokens"]
    return row["method"] if k is None else f"{row['method']}-k{k}"


def _check_run(folder: RunFolder, rows: int) -> dict:
    """Every row once, each tagged with the set-up its part's figures name; the pilot's set-up first (the one its
    record names), the rest the winner."""
    out = _rows(folder)
    assert sorted(r["row_id"] for r in out) == sorted({r["row_id"] for r in out}) and len(out) == rows
    setups = _setups(folder)
    for number, part in enumerate(folder.parts()):
        assert {_label(r) for r in pq.read_table(part).to_pylist()} == {setups[number]}
    decision = json.loads(folder.decision_path.read_text())
    assert setups[0] == folder.read_auto_pilot()["label"] == decision["pilot"]
    assert setups[max(setups)] == decision["winner"]
    return decision


def test_a_shard_pilots_measures_decides_and_runs_the_rest_with_the_winner(tmp_path: Path) -> None:
    job = auto_job(tmp_path, "spec.auto.candidates=[none,ngram-k2,ngram-k5,suffix-k5]", "spec.auto.measure_top=2")
    result = run_job(job)
    decision = _check_run(result.folder, 40)
    plan = json.loads(result.folder.auto_plan_path.read_text())
    assert plan["measuring"] and len(plan["measure"]) == 2
    # Pilot 3 slices of 2 rows, 2 measurements of 3 slices of 2, then the rest in chunks of 8: 6 + 12 + 22 rows.
    setups = _setups(result.folder)
    assert [setups[n] for n in range(3)] == ["none"] * 3
    assert [setups[n] for n in range(3, 9)] == [plan["measure"][0]] * 3 + [plan["measure"][1]] * 3
    assert {setups[n] for n in range(9, len(setups))} == {decision["winner"]}
    by_setup = {c["setup"]: c for c in decision["candidates"]}
    assert len(by_setup["none"]["slices_tok_s"]) == 3
    for label in plan["measure"]:
        assert len(by_setup[label]["slices_tok_s"]) == 3 and by_setup[label]["speedup"] is not None
    assert decision["measured"] and decision["winner"] in ["none", *plan["measure"]]
    assert result.summary.rows == 40


def test_at_the_jobs_batch_a_small_shard_only_pilots_and_predicts(tmp_path: Path) -> None:
    """Slices as large as the job's batch (the dummy's 256) do not fit 40 rows: one pilot slice of pilot_rows."""
    job = auto_job(tmp_path, "spec.auto.candidates=[none,ngram-k2]", "spec.auto.slice_rows=null")
    result = run_job(job)
    decision = _check_run(result.folder, 40)
    plan = json.loads(result.folder.auto_plan_path.read_text())
    assert not plan["measuring"] and "3 slices of 256 each" in plan["why"] and plan["pilot_rows"] == 6
    setups = _setups(result.folder)
    assert setups[0] == "none" and {setups[n] for n in setups if n > 0} == {decision["winner"]}
    assert len(pq.read_table(result.folder.part_path(0))) == 6


def test_when_measuring_does_not_pay_the_best_prediction_runs_unmeasured(tmp_path: Path) -> None:
    job = auto_job(tmp_path, "spec.auto.candidates=[none,ngram-k2]", "spec.auto.budget=0")
    result = run_job(job)
    decision = _check_run(result.folder, 40)
    plan = json.loads(result.folder.auto_plan_path.read_text())
    assert not plan["measuring"] and "more than spec.auto.budget=0 " in plan["why"]
    assert not decision["measured"] and "not measured" in decision["why"]
    assert {s for n, s in _setups(result.folder).items() if n >= 3} == {decision["winner"]}


def _force_winner(monkeypatch, label: str) -> None:
    """The unmeasured pick made ``label`` (the dummy's made-up tokens never repeat, so replay picks none): the
    prediction's own rule, with the choice per batch occupancy (which its own tests cover) out of the way."""
    monkeypatch.setattr(deciding, "unmeasured_winner", lambda predicted: (label, "forced by the test"))
    monkeypatch.setattr(generation.AutoShardGeneration, "_per_occupancy", lambda self, folder, plan: None)


def _engine_label(job) -> str:
    """The set-up an engine was started for: a roomy engine's (specbatch.auto.engines) is its schedule's first k."""
    spec = job.spec
    return f"{spec.method.value}-k{spec.k_schedule[0][2]}" if spec.k_schedule else spec.label


def _launches(folder: RunFolder) -> list[str]:
    return [folder.read_part_stats(n)["launch"] for n in folder.part_numbers()]


def test_unmeasured_the_pilot_heads_a_none_stream_and_the_winner_takes_the_rest(tmp_path: Path, monkeypatch) -> None:
    """Nothing measured (budget 0): the pilot is the first chunk of spec=none's stream, not a wave of its own. The
    engine takes 4 requests at once here, so when the pilot's 6 rows are written only the next chunk is in
    flight: it finishes with none, and the winner generates the rest."""
    _force_winner(monkeypatch, "ngram-k2")
    job = auto_job(tmp_path, "spec.auto.candidates=[none,ngram-k2]", "spec.auto.budget=0", "engine.max_num_seqs=2")
    result = run_job(job)
    decision = _check_run(result.folder, 40)
    assert decision["winner"] == "ngram-k2" and not decision["measured"]
    setups, launches = _setups(result.folder), _launches(result.folder)
    order = [setups[n] for n in sorted(setups)]
    handed = order.index("ngram-k2")
    assert order == ["none"] * handed + ["ngram-k2"] * (len(order) - handed)
    # The pilot and what was in flight with it: one stream of spec=none, then one of the winner.
    assert handed >= 2 and len(set(launches[:handed])) == 1 and len(set(launches[handed:])) == 1
    assert len(pq.read_table(result.folder.part_path(0))) == 6


def test_unmeasured_a_none_that_wins_costs_no_second_stream(tmp_path: Path, monkeypatch) -> None:
    _force_winner(monkeypatch, "none")
    job = auto_job(tmp_path, "spec.auto.candidates=[none,ngram-k2]", "spec.auto.budget=0", "engine.max_num_seqs=2")
    result = run_job(job)
    assert _check_run(result.folder, 40)["winner"] == "none"
    assert set(_setups(result.folder).values()) == {"none"} and len(set(_launches(result.folder))) == 1


def test_a_shard_the_engine_takes_in_at_once_runs_with_none_and_says_so(tmp_path: Path, monkeypatch, caplog) -> None:
    """40 rows and the dummy's batch of 256: every row is admitted before the pilot is done; the winner is named
    in the decision and the log says no row was left for it."""
    _force_winner(monkeypatch, "ngram-k2")
    job = auto_job(tmp_path, "spec.auto.candidates=[none,ngram-k2]", "spec.auto.budget=0")
    with caplog.at_level(logging.INFO, logger="specbatch.auto.generation"):
        result = run_job(job)
    assert json.loads(result.folder.decision_path.read_text())["winner"] == "ngram-k2"
    assert set(_setups(result.folder).values()) == {"none"} and len(_rows(result.folder)) == 40
    assert "ngram-k2 won, but no row of this shard was left for it" in caplog.text


class _Killed(Exception):
    pass


def killed_run(job) -> tuple[RunFolder, dict[int, str]]:
    """Run ``job`` until a patched phase kills it: its folder, and the launch that wrote each part written."""
    with pytest.raises(_Killed):
        run_job(job)
    folder = RunFolder.for_job(job)
    return folder, {n: folder.read_part_stats(n)["launch"] for n in folder.part_numbers()}


@pytest.mark.parametrize("phase", ["pilot", "plan", "measuring", "rest"])
def test_a_kill_in_any_phase_resumes_with_every_row_once(phase: str, tmp_path: Path, monkeypatch) -> None:
    job = auto_job(tmp_path, "spec.auto.candidates=[none,ngram-k2,ngram-k5]")
    streams = {"pilot": 2, "measuring": 5, "rest": 10}
    real_stream, real_plan = AutoShardGeneration._stream, AutoShardGeneration._plan
    calls = []

    def stream(self, *args, **kwargs):
        calls.append(1)
        if phase in streams and len(calls) == streams[phase]:
            real_stream(self, *args, **kwargs)  # this slice is written, then the job dies
            raise _Killed(phase)
        return real_stream(self, *args, **kwargs)

    def plan(self, folder):
        if phase == "plan":
            raise _Killed(phase)
        return real_plan(self, folder)

    monkeypatch.setattr(AutoShardGeneration, "_stream", stream)
    monkeypatch.setattr(AutoShardGeneration, "_plan", plan)
    folder, before = killed_run(job)
    plan_before = folder.auto_plan_path.read_text() if folder.auto_plan_path.exists() else None
    monkeypatch.setattr(AutoShardGeneration, "_stream", real_stream)
    monkeypatch.setattr(AutoShardGeneration, "_plan", real_plan)
    result = run_job(job)
    _check_run(result.folder, 40)
    # What the killed launch wrote is kept as it was, its plan too.
    assert {n: folder.read_part_stats(n)["launch"] for n in before} == before
    if plan_before is not None:
        assert folder.auto_plan_path.read_text() == plan_before


# Where a stop signal comes: in the first pilot slice's stream, the first measurement slice's, or while spec=none's
# stream drains after the unmeasured decision handed the rest to the winner. Each time every row of the stream had
# been admitted, so the stream itself has nothing to stop; then the job must start no engine, stream or phase more.
_STOP_IN = {
    "pilot": (["spec.auto.candidates=[none,ngram-k2,ngram-k5]"], 1, ["none"]),
    "measurement": (["spec.auto.candidates=[none,ngram-k2,ngram-k5]"], 4, None),
    "after the decision": (
        ["spec.auto.candidates=[none,ngram-k2]", "spec.auto.budget=0", "engine.max_num_seqs=2"],
        1,
        ["none"],
    ),
}


@pytest.mark.parametrize("phase", list(_STOP_IN))
def test_a_stop_in_any_phase_begins_nothing_new_and_a_rerun_finishes(phase: str, tmp_path: Path, monkeypatch) -> None:
    overrides, in_stream, engines = _STOP_IN[phase]
    if phase == "after the decision":
        _force_winner(monkeypatch, "ngram-k2")
    job = auto_job(tmp_path, *overrides)
    folder = RunFolder.for_job(job)
    streams, started, signalled = [], [], []
    real_stream, real_start, real_step = ChunkStreamer.run, auto_engines.start_engine, DummyEngine.step

    def stream(self, *args, **kwargs):
        streams.append(1)
        return real_stream(self, *args, **kwargs)

    def start(job):
        engine = real_start(job)
        started.append(_engine_label(job))
        return engine

    def step(engine):
        ready = len(streams) == in_stream and engine.unfinished
        if phase == "after the decision":
            ready = ready and folder.decision_path.exists()
        if ready and not signalled:
            signalled.append(len(streams))
            os.kill(os.getpid(), signal.SIGTERM)  # as Slurm's time limit does; handled in this thread at once
        return real_step(engine)

    monkeypatch.setattr(ChunkStreamer, "run", stream)
    monkeypatch.setattr(auto_engines, "start_engine", start)
    monkeypatch.setattr(DummyEngine, "step", step)
    with pytest.raises(StopRequested) as stopped, stop_signals_raise():  # as jobs/generate.py runs a job
        run_job(job)
    assert signalled == [in_stream] and stopped.value.exit_code == 143
    assert "stopped by SIGTERM before" in str(stopped.value)
    # Nothing began after the stream the signal came in: no stream, no engine.
    assert len(streams) == in_stream and started == (engines or started[:2]) and len(started) == len(set(started))
    assert not folder.is_done() and folder.part_numbers()
    if phase == "after the decision":
        assert json.loads(folder.decision_path.read_text())["winner"] == "ngram-k2"
    forget_stop()
    monkeypatch.setattr(DummyEngine, "step", real_step)
    _check_run(run_job(job).folder, 40)


@pytest.mark.parametrize("phase", ["lead", "decision"])
def test_unmeasured_a_kill_resumes_with_every_row_once(phase: str, tmp_path: Path, monkeypatch) -> None:
    """Killed after spec=none's stream handed over (its parts and the decision written), or while the pilot's
    decision was being made (the chunks in flight with it lost): the rerun decides from the pilot's part without
    starting spec=none again and generates the rest with the winner."""
    _force_winner(monkeypatch, "ngram-k2")
    job = auto_job(tmp_path, "spec.auto.candidates=[none,ngram-k2]", "spec.auto.budget=0", "engine.max_num_seqs=2")
    real_stream, real_plan = AutoShardGeneration._stream, AutoShardGeneration._plan

    def stream(self, *args, **kwargs):
        real_stream(self, *args, **kwargs)
        raise _Killed(phase)

    def plan(self, folder):
        raise _Killed(phase)

    monkeypatch.setattr(
        AutoShardGeneration, "_stream" if phase == "lead" else "_plan", stream if phase == "lead" else plan
    )
    with pytest.raises(_Killed):
        run_job(job)
    folder = RunFolder.for_job(job)
    before = {n: folder.read_part_stats(n)["launch"] for n in folder.part_numbers()}
    assert 0 in before and (phase == "lead") == folder.decision_path.exists()
    monkeypatch.setattr(AutoShardGeneration, "_stream", real_stream)
    monkeypatch.setattr(AutoShardGeneration, "_plan", real_plan)
    started = []
    real_start = auto_engines.start_engine
    monkeypatch.setattr(
        auto_engines, "start_engine", lambda job: started.append(_engine_label(job)) or real_start(job)
    )
    result = run_job(job)
    _check_run(result.folder, 40)
    assert {n: folder.read_part_stats(n)["launch"] for n in before} == before
    assert started == ["ngram-k2"]


def test_shards_use_the_first_decision_written(tmp_path: Path, monkeypatch) -> None:
    """Shard 1 measures beside shard 0 (both started before either decided): its own figures would pick another
    set-up, but shard 0's decision is written first and shard 1's remaining rows run with it."""
    base = ["spec.auto.candidates=[none,ngram-k2]", "shard.count=2", "max_samples=60"]
    first = run_job(auto_job(tmp_path, *base, "shard.index=0"))
    theirs = json.loads(first.folder.decision_path.read_text())
    other = "none" if theirs["winner"] != "none" else "ngram-k2"
    real_decide = deciding.decide
    monkeypatch.setattr(
        deciding, "decide", lambda rates, pilot="none", _=(): (other, "this shard's own pick", real_decide(rates)[2])
    )
    # Shard 1 as if it had started at the same moment: no decision yet when it began, shard 0's when it decides.
    shared = first.folder.decision_path.read_text()
    first.folder.decision_path.unlink()
    real_make = AutoShardGeneration._decide

    def decide_late(self, folder, plan):
        folder.decision_path.write_text(shared)
        return real_make(self, folder, plan)

    monkeypatch.setattr(AutoShardGeneration, "_decide", decide_late)
    second = run_job(auto_job(tmp_path, *base, "shard.index=1"))
    assert json.loads(second.folder.decision_path.read_text())["decided_by"] == "shard-00000-of-00002"
    setups = _setups(second.folder)
    assert setups[0] == "none" and setups[max(setups)] == theirs["winner"] != other


def test_a_shard_started_after_the_decision_runs_every_row_with_the_winner(tmp_path: Path) -> None:
    base = ["spec.auto.candidates=[none,ngram-k2]", "shard.count=2", "max_samples=60"]
    first = run_job(auto_job(tmp_path, *base, "shard.index=0"))
    winner = json.loads(first.folder.decision_path.read_text())["winner"]
    second = run_job(auto_job(tmp_path, *base, "shard.index=1"))
    assert set(_setups(second.folder).values()) == {winner}
    assert not second.folder.auto_plan_path.exists(), "no pilot, no plan: the run's decision was there"
    rows = _rows(first.folder) + _rows(second.folder)
    assert len(rows) == 60 == len({r["row_id"] for r in rows})


def _placeholder_job(root: Path, measuring: bool, *extra: str):
    """auto_job over 40 local rows whose pilot rows (6: 3 slices of 2 when measuring, else pilot_rows) are
    placeholders (error rows, never sent)."""
    if measuring:
        pilot = {row for rows in spread(range(40), 2 * 3, 2)[0][:3] for row in rows}
    else:
        pilot = set(spread(range(40), 1, 6)[0][0])
    data = root / "rows.jsonl"
    lines = [{"id": f"r{i:02d}", "q": ("TODO " if i in pilot else "") + f"question {i}"} for i in range(40)]
    data.write_text("".join(json.dumps(line) + "\n" for line in lines))
    local = ["dataset=local", f"dataset.path={data}", "dataset.template='{q}'", "dataset.id_column=id"]
    budget = [] if measuring else ["spec.auto.budget=0"]
    return auto_job(
        root, *local, "dataset.placeholder_prefix=TODO", "spec.auto.candidates=[none,ngram-k2]", *budget, *extra
    )


@pytest.mark.parametrize("measuring", [True, False])
def test_a_pilot_of_error_rows_keeps_none_and_says_why(measuring: bool, tmp_path: Path) -> None:
    """The pilot's rows fail, so the pilot generates no tokens: nothing to measure or predict against. The shard
    runs every row once with none, and decision.json says why (measured: 3 slices, unmeasured: 1 chunk)."""
    job = _placeholder_job(tmp_path, measuring)
    result = run_job(job)
    decision = _check_run(result.folder, 40)
    plan = json.loads(result.folder.auto_plan_path.read_text())
    assert decision["winner"] == "none" and not decision["measured"] and not plan["measuring"]
    assert decision["why"].startswith("the pilot generated no tokens (6 of 6 output rows were error rows, e.g. ")
    assert "placeholder" in decision["why"] and set(_setups(result.folder).values()) == {"none"}
    by_setup = {c["setup"]: c for c in decision["candidates"]}
    slices = "3 of 3" if measuring else "1 of 1"
    assert by_setup["none"]["no_tokens"].startswith(f"{slices} slice(s) generated no tokens (6 of 6 output rows")
    assert by_setup["none"]["measured_tok_s"] is None and by_setup["ngram-k2"]["no_tokens"] is None
    # Error rows carry the seed their sample's request would have had: the run's own set-up's.
    rows = _rows(result.folder)
    assert sum(r["status"] == "error" for r in rows) == 6
    assert all(r["seed"] == sample_seed(0, "auto", r["row_id"], 0) for r in rows)


def test_a_shard_left_by_the_division_by_a_silent_pilot_finishes(tmp_path: Path, monkeypatch) -> None:
    """Before pilots of no tokens were caught, such a shard measured and then divided by the pilot's 0 tok/s: its
    plan and measured slices were written and no decision, on every rerun. A rerun now decides none from them."""
    job = _placeholder_job(tmp_path, measuring=True)
    with monkeypatch.context() as old:
        old.setattr(deciding, "silent_pilot", lambda folder, pilot: None)
        old.setattr(deciding, "measuring_gain", lambda *args: None)  # it measured whatever it could gain
        # What replay predicted from no completions then: every candidate at tau 1, below none (within the error).
        old.setattr(deciding, "predict", lambda *args: [Predicted("ngram-k2", 1.0, 0.0, 1.0, 0.95)])
        old.setattr(deciding, "decide", lambda rates, pilot="none", _=(): 1 / statistics.median(rates["none"]))
        with pytest.raises(ZeroDivisionError):
            run_job(job)
    folder = RunFolder.for_job(job)
    assert json.loads(folder.auto_plan_path.read_text())["measure"] == ["ngram-k2"]
    assert not folder.decision_path.exists() and len(folder.part_numbers()) == 6
    result = run_job(job)
    decision = _check_run(result.folder, 40)
    assert decision["winner"] == "none" and decision["why"].startswith("the pilot generated no tokens (6 of 6")
    assert [_setups(folder)[n] for n in range(3, 6)] == ["ngram-k2"] * 3, "the measured slices are kept"


def _without_seed_column(folder: RunFolder) -> None:
    """The run's parts as output schema 4 wrote them: no ``seed`` column (their figures' checksums follow)."""
    for number in folder.part_numbers():
        path = folder.part_path(number)
        table = pq.read_table(path)
        metadata = {**table.schema.metadata, SCHEMA_VERSION_KEY: b"4"}
        pq.write_table(table.drop_columns(["seed"]).replace_schema_metadata(metadata), path)
        stats = json.loads(folder.part_stats_path(number).read_text())
        folder.part_stats_path(number).write_text(json.dumps({**stats, "part": PartRecord.of(path).to_dict()}))


def test_auto_rows_draw_seeds_of_their_own_and_compare_checks_them(tmp_path: Path, monkeypatch) -> None:
    """Under sampling every row of an auto run, whichever candidate generated it, records a seed of "auto": none
    is its spec=none baseline's. A run written before that (its spec=none rows drew the baseline's seeds; parts
    without the column) is caught by compare from the seeds alone: those samples are left out, with a note."""
    _force_winner(monkeypatch, "ngram-k2")
    sampled = ["sampling=sampled", "sampling.n=2", "sampling.max_tokens=16", "max_samples=16"]
    common = [
        f"output_root={tmp_path}",
        "engine.backend=dummy",
        "tracking=off",
        "chunk_size=8",
        "engine.max_num_seqs=2",
    ]
    base = run_job(compose_job([*common, "spec=none", *sampled])).folder
    auto = run_job(
        auto_job(
            tmp_path, *sampled, "spec.auto.candidates=[none,ngram-k2]", "spec.auto.budget=0", "engine.max_num_seqs=2"
        )
    ).folder
    rows, base_rows = _rows(auto), _rows(base)
    assert {_label(r) for r in rows} == {"none", "ngram-k2"} and len(rows) == len(base_rows) == 32
    assert all(r["seed"] == sample_seed(0, "auto", r["row_id"], r["sample_index"]) for r in rows)
    assert all(r["seed"] == sample_seed(0, "none", r["row_id"], r["sample_index"]) for r in base_rows)
    comparison = compare([load_run(base.root), load_run(auto.root)])
    (check,) = comparison.distribution
    assert check.result.shared_seeds == 0 and check.result.p_value is not None
    assert not [note for note in comparison.notes if "not independent" in note]

    _without_seed_column(auto)
    comparison = compare([load_run(base.root), load_run(auto.root)])
    (check,) = comparison.distribution
    shared = sum(_label(r) == "none" for r in rows)
    assert 0 < shared < len(rows) and check.result.shared_seeds == shared
    (note,) = [note for note in comparison.notes if "not independent" in note]
    assert note.startswith(f"{auto.root}: {shared} of its first-turn samples were drawn with the seed of")


def _status(root: Path, monkeypatch, caplog) -> tuple[int, str]:
    """jobs/status.py on ``root`` in this process: its exit code and what it said."""
    monkeypatch.setattr(sys, "argv", ["status.py", str(root)])
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="specbatch.status"):
        code = runpy.run_path(str(PROJECT_ROOT / "jobs" / "status.py"))["main"]()
    return code, caplog.text


def _lose_the_last_part(folder: RunFolder) -> int:
    """The shard as a kill left it, its last part not written yet."""
    last = folder.part_numbers()[-1]
    folder.drop_part(last)
    folder.unmark_done()
    return last


def test_a_damaged_decision_is_named_by_status_compare_and_resume_and_once_removed_is_made_again(
    tmp_path: Path, monkeypatch, caplog
) -> None:
    job = auto_job(tmp_path, "spec.auto.candidates=[none,ngram-k2]")
    folder = run_job(job).folder
    folder.decision_path.write_text(json.dumps({"format": 1}))
    said = f"{folder.decision_path} is damaged (it lacks winner, "
    code, text = _status(folder.root, monkeypatch, caplog)
    assert code == 1 and "1 damaged of 1 shards" in text and said in text and "decides again" in text
    with pytest.raises(CompareError, match=rf"not compared: .*{re.escape(said)}"):
        _load_runs([folder.root])
    last = _lose_the_last_part(folder)
    # A ConfigError: jobs/generate.py says it in one line and exits 2.
    with pytest.raises(ConfigError, match=re.escape(said)):
        run_job(job)
    assert last not in folder.part_numbers(), "refused before generating"
    # Removed, as the line says: the shard decides again from its measurements and generates the rest.
    folder.decision_path.unlink()
    _check_run(run_job(job).folder, 40)
    assert _status(folder.root, monkeypatch, caplog)[0] == 0


def test_a_damaged_plan_is_named_by_status_and_resume_and_once_removed_is_made_again(
    tmp_path: Path, monkeypatch, caplog
) -> None:
    job = auto_job(tmp_path, "spec.auto.candidates=[none,ngram-k2]")
    folder = run_job(job).folder
    plan = json.loads(folder.auto_plan_path.read_text())
    folder.auto_plan_path.write_text(json.dumps({"format": 1, "why": "-"}))
    said = f"{folder.auto_plan_path} is damaged (it lacks predicted, measure, measuring)"
    code, text = _status(folder.root, monkeypatch, caplog)
    assert code == 1 and said in text and "remove it and rerun the shard" in text
    # The plan is read until the run's decision is made: a shard resumed without one is refused.
    folder.decision_path.unlink()
    last = _lose_the_last_part(folder)
    with pytest.raises(ConfigError, match=re.escape(said)):
        run_job(job)
    assert last not in folder.part_numbers()
    folder.auto_plan_path.unlink()
    _check_run(run_job(job).folder, 40)
    again = json.loads(folder.auto_plan_path.read_text())
    assert again["predicted"] == plan["predicted"] and again["measure"] == plan["measure"], "made from the pilot"


def test_a_candidate_whose_checkpoint_is_missing_is_named_before_anything_loads(tmp_path: Path) -> None:
    job = composed(
        [
            f"output_root={tmp_path}",
            "spec=auto",
            "+spec.auto.checkpoints.eagle3.model=/no/such/head",
            "spec.auto.candidates=[none,ngram-k3,eagle3-k3]",
            "tracking=off",
        ]
    )
    with pytest.raises(ConfigError, match=r"spec.auto.candidates: eagle3-k3 cannot run here: spec.model=/no/such"):
        run_job(job)
    assert not (tmp_path / "runs").exists()


def test_compare_puts_an_auto_run_beside_the_fixed_ones_as_one_set_up(tmp_path: Path) -> None:
    """jobs/compare.py on a spec=auto run and fixed runs of the same rows: one row 'auto → <winner>', matched to
    the same spec=none baseline, and never itself recommended."""
    common = ["engine.backend=dummy", "tracking=off", f"output_root={tmp_path}", "max_samples=40", "chunk_size=8"]
    folders = []
    for spec in (["spec=none"], ["spec=ngram"], ["spec=auto", "spec.auto.candidates=[none,ngram-k3]"]):
        folders.append(run_job(compose_job([*common, *spec])).folder.root)
    winner = json.loads((folders[-1] / "decision.json").read_text())["winner_caption"]
    compared = subprocess.run(
        [sys.executable, str(Path(__file__).resolve().parents[2] / "jobs" / "compare.py"), *map(str, folders)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert compared.returncode == 0, compared.stderr[-3000:]
    table = [line for line in compared.stdout.splitlines() if line.startswith("| smollm2")]
    assert len(table) == 3
    (auto_line,) = [line for line in table if "| auto → " in line]
    assert f"| auto → {winner} |" in auto_line
    # Matched to the baseline: it has a speedup, and its rows are compared with spec=none's.
    cells = [c.strip() for c in auto_line.split("|")]
    assert cells[9] != "-" and cells[-3] == "40/40"
    (recommended,) = [line for line in compared.stdout.splitlines() if line.startswith("recommended at batch")]
    assert "auto" not in recommended.split("—")[0], "auto chooses among set-ups; it is not one to recommend"


def test_serving_spec_auto_says_to_serve_its_decision_instead() -> None:
    serve = Path(__file__).resolve().parents[2] / "jobs" / "serve.py"
    result = subprocess.run(
        [sys.executable, str(serve), "--print", "spec=auto"], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "serve what its decision.json names under overrides" in result.stderr
    assert "Traceback" not in result.stderr


# --- what an auto run reports of the set-ups that generated its rows ---


def _by_setup(folder: RunFolder) -> dict[str, list[dict]]:
    """The shard's rows by the set-up their part's figures name."""
    setups, out = _setups(folder), {}
    for number, part in zip(folder.part_numbers(), folder.parts(), strict=True):
        out.setdefault(setups[number], []).extend(pq.read_table(part).to_pylist())
    return out


def _check_setup_figures(per_setup: dict, rows: dict[str, list[dict]]) -> None:
    """Each set-up's figures are its own rows' (drafting counted from the rows), and (speculative) all the drafting
    set-ups' rows together, AL from the summed counts."""
    drafting = [row for label, each in rows.items() if label != "none" for row in each]
    for label, each in [*rows.items(), ("(speculative)", drafting)]:
        figures = per_setup[label]
        assert figures["rows"] == len(each), label
        assert figures["output_tokens"] == sum(r["completion_tokens"] for r in each), label
        if label == "none":
            assert figures["drafts"] is figures["mean_acceptance_length"] is None
            continue
        drafts, accepted = sum(r["spec_steps"] for r in each), sum(r["accepted_tokens"] for r in each)
        assert (figures["drafts"], figures["accepted_tokens"]) == (drafts, accepted), label
        assert figures["draft_tokens"] == sum(r["draft_tokens"] for r in each), label
        assert figures["mean_acceptance_length"] == pytest.approx(1 + accepted / drafts), label


def test_an_auto_run_reports_the_figures_of_each_set_up_and_of_its_speculative_rows(
    tmp_path: Path, monkeypatch, caplog
) -> None:
    """The issue's case: the winner generated most rows, and the summary, its table in the log and the profile say
    what it achieved (the run's own acceptance figures stay null: no one k ran it all)."""
    _force_winner(monkeypatch, "ngram-k2")
    job = auto_job(tmp_path, "spec.auto.candidates=[none,ngram-k2]", "spec.auto.budget=0", "engine.max_num_seqs=2")
    with caplog.at_level(logging.INFO, logger="specbatch.run.executor"):
        result = run_job(job)
    rows = _by_setup(result.folder)
    assert set(rows) == {"none", "ngram-k2"} and len(rows["ngram-k2"]) > len(rows["none"])
    summary = result.summary
    assert summary.mean_acceptance_length is None and summary.num_speculative_tokens is None
    assert set(summary.per_setup) == {"none", "ngram-k2", "(speculative)"}
    assert summary.per_setup["none"]["roles"] == ["pilot"] and summary.per_setup["ngram-k2"]["roles"] == ["winner"]
    _check_setup_figures(summary.per_setup, rows)
    assert json.loads(result.folder.stats_path.read_text())["per_setup"] == summary.per_setup
    # The log's table, in the order the run went.
    assert re.search(
        r"\nnone +pilot +\d+ .*\nngram-k2 +winner +\d+ .*\n\(speculative\) +drafting set-ups", caplog.text
    )

    # The profile is ModelOpt's schema 1.0 over the drafting set-ups' rows; each set-up apart under ours.
    profile = read_profile(result.folder.profile_path)
    assert schema_problems(profile) == [] and profile["measured"]
    assert profile["validation"]["mean_consistency"]["passed"]
    speculative, ours = summary.per_setup["(speculative)"], profile["specbatch"]
    assert (profile["method"], profile["num_speculative_tokens"]) == ("auto", 2)
    assert ours["rows"] == len(rows["ngram-k2"]) and profile["accept_length_model"] == "measured_per_k"
    assert (ours["drafts"], ours["accepted_tokens"]) == (speculative["drafts"], speculative["accepted_tokens"])
    assert profile["mean_accept_length"] == pytest.approx(speculative["mean_acceptance_length"], abs=1e-6)
    assert profile["mean_accept_length"] == pytest.approx(1 + sum(profile["marginal_accept_rates"]), abs=1e-5)
    setups = ours["setups"]
    assert setups["none"] == {"roles": ["pilot"], "num_speculative_tokens": None, "rows": len(rows["none"])}
    ngram = setups["ngram-k2"]
    assert ngram["roles"] == ["winner"] and ngram["num_speculative_tokens"] == 2
    # The winner generated every drafting row: its figures are the profile's own.
    assert ngram["acceptance_length_histogram"] == profile["acceptance_length_histogram"]
    assert ngram["marginal_accept_rates"] == profile["marginal_accept_rates"] and ngram["drafts"] == ours["drafts"]


def test_a_merged_auto_run_adds_up_each_set_up_over_its_shards(tmp_path: Path) -> None:
    """Two shards, the first pilots, measures and decides, the second runs every row with the run's winner: the
    merged summary and profile count each set-up over both, with the roles each played."""
    base = ["spec.auto.candidates=[none,ngram-k2,ngram-k5]", "shard.count=2", "max_samples=80"]
    shards = [run_job(auto_job(tmp_path, *base, f"shard.index={index}")).folder for index in range(2)]
    rows: dict[str, list[dict]] = {}
    for folder in shards:
        for label, each in _by_setup(folder).items():
            rows.setdefault(label, []).extend(each)
    decision = json.loads(shards[0].decision_path.read_text())
    plan = json.loads(shards[0].auto_plan_path.read_text())
    assert plan["measuring"] and plan["measure"]

    merged = merge_shards(shards[0].root).summary
    assert merged.rows == 80 and sum(merged.per_setup[label]["rows"] for label in rows) == 80
    _check_setup_figures(merged.per_setup, rows)
    assert merged.per_setup["none"]["roles"][0] == "pilot"
    for label in plan["measure"]:
        assert "measured" in merged.per_setup[label]["roles"]
    assert "winner" in merged.per_setup[decision["winner"]]["roles"]
    profile = read_profile(RunFolder(shards[0].root).merged_profile_path)
    assert schema_problems(profile) == [] and profile["method"] == "auto"
    setups = profile["specbatch"]["setups"]
    assert profile["specbatch"]["drafts"] == merged.per_setup["(speculative)"]["drafts"]
    assert {label: entry["roles"] for label, entry in setups.items()} == {
        label: merged.per_setup[label]["roles"] for label in rows
    }
    # The set-ups' histograms add up to the run's, each at its own k.
    drafting = [entry for entry in setups.values() if entry["num_speculative_tokens"]]
    summed = {
        length: sum(e["acceptance_length_histogram"].get(length, 0) for e in drafting)
        for length in profile["acceptance_length_histogram"]
    }
    assert summed == profile["acceptance_length_histogram"]
    assert all(len(e["marginal_accept_rates"]) == e["num_speculative_tokens"] for e in drafting)
