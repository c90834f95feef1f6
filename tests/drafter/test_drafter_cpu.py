"""The drafter hand-off on real vLLM (CPU build): a spec=none run of the embedded model on 8 rows of two turns is
exported as speculators' training data, which speculators' own loader reads; a few training steps give a head in
speculators' format that vLLM loads as spec=eagle3 spec.model=<head> and that reproduces spec=none token for token
(float32, greedy); the training is an MLflow run in the data's store; the head's acceptance is read offline from the
export (jobs/eval_drafter.py). A smoke test: the head is barely trained, so its acceptance's value is not checked."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import mlflow
import pyarrow.parquet as pq
import pytest
import torch

from conftest import PROJECT_ROOT, run_generate
from specbatch.drafter.export import EXPORT_RECORD, LAYERS_FILE, export_run, shard_name
from specbatch.drafter.train import TRAINED_RECORD
from specbatch.run.folder import shard_folders

pytestmark = pytest.mark.slow

ROWS, MAX_TOKENS = 8, 32
# Two turns a row: the second turn's prompt is the conversation so far, the first answer in it.
TURNS = [
    ["Name a fruit.", "What colour is it?"],
    ["Write a Python function that adds two numbers.", "Now make it add three."],
    ["What is the capital of France?", "And of Italy?"],
    ["Give me a word that rhymes with cat.", "Another one, please."],
    ["Translate 'good morning' into French.", "And into German?"],
    ["List three prime numbers.", "What is their sum?"],
    ["Write a haiku about the sea.", "Now one about a mountain."],
    ["What does a Python list comprehension do?", "Show an example."],
]
COMMON = [
    "model.dtype=float32",
    "dataset=local",
    "dataset.prompt_format=turns",
    "dataset.turns_column=turns",
    "dataset.id_column=id",
    f"sampling.max_tokens={MAX_TOKENS}",
    "engine.warmup=false",
]
# Training steps of the smoke test: enough to change every weight, few enough for the slowest machine.
STEPS = 3


def _tokens(run: Path) -> dict[tuple[str, int], list[int]]:
    rows = [r for shard in shard_folders(run) for part in shard.parts() for r in pq.read_table(part).to_pylist()]
    return {(r["row_id"], r["turn"]): r["completion_token_ids"] for r in rows}


@pytest.fixture(scope="module")
def flow(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("drafter")
    data = root / "turns.jsonl"
    data.write_text("".join(json.dumps({"id": f"r{i}", "turns": turns}) + "\n" for i, turns in enumerate(TURNS)))
    common = [*COMMON, f"dataset.path={data}"]
    tracking = ["tracking=sqlite", f"tracking.uri=sqlite:///{root}/mlflow.db"]
    done = run_generate(["spec=none", f"output_root={root}", *tracking, *common])
    assert done.returncode == 0, done.stderr[-4000:]
    [none] = root.glob("runs/*/*/none-*")
    export = root / "export"
    export_run(none, export)
    head = root / "head"
    trained = subprocess.run(
        [sys.executable, str(PROJECT_ROOT / "jobs" / "train_drafter.py"), str(export), str(head)]
        + [f"--max-steps={STEPS}", "--tokens-per-step=512", "--draft-vocab-size=2048"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert trained.returncode == 0, trained.stderr[-4000:]
    done = run_generate(["spec=eagle3", f"spec.model={head}", f"output_root={root}", "tracking=off", *common])
    assert done.returncode == 0, done.stderr[-4000:]
    [eagle3] = root.glob("runs/*/*/eagle3-*")
    return {"root": root, "none": none, "export": export, "head": head, "eagle3": eagle3, "log": trained.stderr}


def test_speculators_loader_reads_every_turn_as_the_engine_saw_it(flow: dict[str, Path]) -> None:
    from safetensors.torch import load_file
    from speculators.data_generation.offline import check_hidden_states
    from speculators.train.data import ArrowDataset

    rows = [r for s in shard_folders(flow["none"]) for p in s.parts() for r in pq.read_table(p).to_pylist()]
    assert sorted(r["turn"] for r in rows) == [1] * ROWS + [2] * ROWS, "each turn is a sequence of its own"
    shard = flow["export"] / shard_name(0, 1)
    data = ArrowDataset(max_len=4096, datapath=str(shard), on_missing="raise", hidden_states_dtype=torch.float32)
    assert len(data) == len(rows) == 2 * ROWS
    layers = json.loads((shard / LAYERS_FILE).read_text())["layer_ids"]
    assert layers == [2, 15, 27, 30]  # SmolLM2's 30 layers: vLLM's auxiliary layers, then the last (before its norm)
    for i, row in enumerate(rows):
        sample = data[i]
        expected = row["prompt_token_ids"] + row["completion_token_ids"]
        assert sample["input_ids"].tolist() == expected
        # The loss on the generated tokens only.
        prompt, completion = len(row["prompt_token_ids"]), len(row["completion_token_ids"])
        assert sample["loss_mask"].tolist() == [0] * prompt + [1] * completion
        assert sample["hidden_states"].shape == (len(expected), 3 * 576)
        check_hidden_states(load_file(shard / "hidden_states" / f"hs_{i}.safetensors"), expected)
    # A second turn's prompt holds the first turn's answer: the conversation as the engine saw it.
    first = {r["row_id"]: r for r in rows if r["turn"] == 1}
    for row in (r for r in rows if r["turn"] == 2):
        answer = first[row["row_id"]]["completion_token_ids"]
        text = row["prompt_token_ids"]
        assert any(text[i : i + len(answer)] == answer for i in range(len(text))), row["row_id"]


def test_an_export_run_again_keeps_what_it_wrote(flow: dict[str, Path]) -> None:
    again = export_run(flow["none"], flow["export"])
    assert (again.shards_written, again.shards_kept) == (0, 1)
    assert json.loads((flow["export"] / EXPORT_RECORD).read_text())["run"] == str(flow["none"])


def test_the_head_runs_in_vllm_and_reproduces_spec_none_token_for_token(flow: dict[str, Path]) -> None:
    config = json.loads((flow["head"] / "config.json").read_text())
    assert config["speculators_model_type"] == "eagle3" and config["draft_vocab_size"] == 2048
    assert _tokens(flow["eagle3"]) == _tokens(flow["none"])
    record = json.loads((flow["head"] / TRAINED_RECORD).read_text())
    assert record["steps"] == STEPS and record["runs"] == [str(flow["none"])]
    assert "loss=" in flow["log"]  # the progress bar shows the loss


def test_the_training_is_an_mlflow_run_in_the_datas_store(flow: dict[str, Path]) -> None:
    client = mlflow.MlflowClient(f"sqlite:///{flow['root']}/mlflow.db")
    runs = [
        r
        for e in client.search_experiments()
        for r in client.search_runs([e.experiment_id], "tags.`specbatch.kind` = 'drafter_training'")
    ]
    [run] = runs
    assert run.info.status == "FINISHED" and run.data.tags["specbatch.data_runs"] == str(flow["none"])
    assert len(client.get_metric_history(run.info.run_id, "train/loss")) == STEPS
    assert run.data.params["train.max_steps"] == str(STEPS)


def test_the_heads_acceptance_is_read_offline_from_an_export_of_its_own_target(
    flow: dict[str, Path], tmp_path: Path
) -> None:
    from specbatch.config import ConfigError
    from specbatch.drafter.evaluate import evaluate_head

    rows = [r for s in shard_folders(flow["none"]) for p in s.parts() for r in pq.read_table(p).to_pylist()]
    generated = sum(len(r["completion_token_ids"]) for r in rows)
    result = evaluate_head(flow["head"], [flow["export"]], k=3)
    # A draft follows every generated token (the target's own next choice there is known from its distribution).
    assert result.sequences == 2 * ROWS and result.positions == generated
    assert len(result.accepted) == 3 and all(0 <= a <= 1 for a in result.accepted)
    assert result.accepted == sorted(result.accepted, reverse=True)  # a later draft counts only after the earlier
    assert result.acceptance_length == pytest.approx(1 + sum(result.accepted))
    other = tmp_path / "other-head"
    other.mkdir()
    config = json.loads((flow["head"] / "config.json").read_text())
    config["speculators_config"]["verifier"]["name_or_path"] = str(tmp_path / "another-model")
    (other / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="drafts for .*another-model.*its own target"):
        evaluate_head(other, [flow["export"]])
    with pytest.raises(ConfigError, match="is not a head"):
        evaluate_head(tmp_path, [flow["export"]])


def test_a_stopped_training_goes_on_from_its_checkpoint_through_the_same_steps(
    flow: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from dataclasses import replace

    from safetensors.torch import load_file

    from specbatch.drafter import training_state
    from specbatch.drafter.train import TrainSettings, read_exports, train_head

    caplog.set_level(logging.INFO, logger="specbatch.drafter.training_state")
    data = read_exports([flow["export"]])
    settings = TrainSettings(epochs=2, tokens_per_step=512, draft_vocab_size=2048, prompt_loss=True, feature_noise=0.1)
    whole = train_head(data, tmp_path / "whole", settings)
    per_epoch = whole.steps // 2
    assert per_epoch >= 2, "the test stops inside the second epoch"

    class Stop(Exception):
        pass

    def stop_at(step_wanted: int):
        def on_step(step: int, loss: float, accuracies: dict[str, float]) -> None:
            if step == step_wanted:
                raise Stop

        return on_step

    # A checkpoint after every step; the stop comes inside the second epoch, so the resumed training deals that
    # epoch's order again and skips what was done, with the noise and the schedule where they were.
    monkeypatch.setattr(training_state, "CHECKPOINT_SECONDS", 0.0)
    out = tmp_path / "resumed"
    with pytest.raises(Stop):
        train_head(data, out, settings, stop_at(per_epoch + 2))
    checkpoint = training_state.checkpoint_path(out)
    assert checkpoint.is_file() and not out.exists()
    curve: list[tuple[int, float]] = []
    resumed = train_head(data, out, settings, lambda step, loss, _: curve.append((step, loss)))
    assert "resuming the training" in caplog.text
    # The run that finishes the head logs the whole loss curve, the steps before the stop included.
    assert [step for step, _ in curve] == list(range(1, whole.steps + 1))
    assert [loss for _, loss in curve] == pytest.approx(whole.losses, rel=1e-5)
    assert resumed.steps == whole.steps and resumed.tokens == whole.tokens
    assert resumed.losses == pytest.approx(whole.losses, rel=1e-5)
    weights, again = load_file(tmp_path / "whole" / "model.safetensors"), load_file(out / "model.safetensors")
    assert weights.keys() == again.keys()
    assert all(torch.allclose(weights[k], again[k], rtol=1e-4, atol=1e-6) for k in weights)
    assert not checkpoint.exists(), "the checkpoint goes once the head is in place"

    # A checkpoint of other settings is not resumed from: that training starts again, and says so.
    other = tmp_path / "other"
    with pytest.raises(Stop):
        train_head(data, other, settings, stop_at(2))
    caplog.clear()
    started = train_head(data, other, replace(settings, learning_rate=2e-3))
    assert "of other data or settings: training starts again" in caplog.text
    assert started.steps == whole.steps and not training_state.checkpoint_path(other).exists()
