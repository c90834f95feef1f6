"""The training's own arithmetic and files, without a model: speculators' learning-rate schedule, and a head written
whole (what a killed training left is removed, never read as a head), the loss mask of --prompt-loss and
--feature-noise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specbatch.config import ConfigError
from specbatch.drafter.train import (
    TRAINED_RECORD,
    TrainingData,
    TrainSettings,
    _save,
    learning_rate_factor,
    training_batch,
)


def test_the_rate_warms_up_over_the_first_hundredth_then_falls_to_zero() -> None:
    total = 1000
    factors = [learning_rate_factor(step, total) for step in range(total)]
    assert factors[0] == pytest.approx(0.1) and factors[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(factors[9:], factors[10:], strict=False))
    assert factors[-1] == pytest.approx(1 / 990)
    assert learning_rate_factor(0, 3) == 1.0  # a smoke test of 3 steps warms up in one


def test_prompt_loss_learns_at_every_real_position_and_never_at_padding() -> None:
    import torch

    # Two packed sequences (documents 0 and 1), their prompts unmasked, then two padded positions.
    collated = {
        "document_ids": torch.tensor([[0, 0, 0, 1, 1, 1, -1, -1]]),
        "loss_mask": torch.tensor([[0, 1, 1, 0, 0, 1, 0, 0]]),
        "lengths": [3, 3],
    }
    kept = training_batch(dict(collated), TrainSettings())
    assert "lengths" not in kept and kept["loss_mask"].tolist() == [[0, 1, 1, 0, 0, 1, 0, 0]]
    everywhere = training_batch(dict(collated), TrainSettings(prompt_loss=True))
    assert everywhere["loss_mask"].tolist() == [[1, 1, 1, 1, 1, 1, 0, 0]]
    assert everywhere["loss_mask"].dtype == collated["loss_mask"].dtype


def test_feature_noise_is_a_share_of_each_layers_own_scale_and_seeded() -> None:
    import torch

    # Three captured layers of width 4096 at very different scales, side by side, as speculators concatenates them.
    scales = torch.tensor([0.1, 1.0, 50.0])
    states = (torch.randn(1, 6, 3, 4096) * scales[:, None]).flatten(-2)
    collated = {"hidden_states": states, "document_ids": torch.zeros(1, 6), "loss_mask": torch.ones(1, 6)}
    assert torch.equal(training_batch(dict(collated), TrainSettings())["hidden_states"], states)
    settings = TrainSettings(feature_noise=0.1)
    noisy = training_batch(dict(collated), settings, 3, torch.Generator().manual_seed(0))["hidden_states"]
    added = (noisy - states).unflatten(-1, (3, -1))
    share = added.pow(2).mean(-1).sqrt() / states.unflatten(-1, (3, -1)).pow(2).mean(-1).sqrt()
    assert torch.allclose(share, torch.full_like(share, 0.1), rtol=0.05)
    again = training_batch(dict(collated), settings, 3, torch.Generator().manual_seed(0))["hidden_states"]
    assert torch.equal(noisy, again)
    with pytest.raises(ConfigError, match="--feature-noise"):
        TrainSettings(feature_noise=1.5)


class _Model:
    def save_pretrained(self, path: str) -> None:
        Path(path).mkdir(parents=True)
        (Path(path) / "config.json").write_text("{}")


def test_a_head_is_renamed_into_place_whole_and_a_killed_trainings_leftover_removed(tmp_path: Path) -> None:
    out = tmp_path / "head"
    left = tmp_path / ".head.building-999999999"  # no such process: a kill -9 left it
    left.mkdir()
    running = tmp_path / f".head.building-{1}"  # init is alive: another training still writing
    running.mkdir()
    data = TrainingData([tmp_path / "data"], [], {"name": "m", "path": "/m"}, [2, 15, 27, 30], 576, ["run"])
    _save(_Model(), out, data, TrainSettings(max_steps=3), [2.0, 1.5, 1.0], 100, 1.0)
    assert json.loads((out / TRAINED_RECORD).read_text())["last_loss"] == 1.0
    assert (out / "config.json").is_file()
    assert not left.exists() and running.exists()


def test_a_damaged_checkpoint_is_not_resumed_from_and_a_killed_writers_leftover_is_removed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from specbatch.drafter import training_state

    path = training_state.checkpoint_path(tmp_path / "head")
    assert path == tmp_path / ".head.checkpoint.pt"
    left = path.with_name(f"{path.name}.999999999.partial")  # no such process: a kill -9 while writing
    running = path.with_name(f"{path.name}.1.partial")  # init is alive: another training still writing
    for partial in (left, running):
        partial.write_bytes(b"half a checkpoint")
    # Nothing to resume: the training's objects are never touched.
    assert training_state.load(path, {}, None, None, None, None) is None
    assert not left.exists() and running.exists()
    path.write_bytes(b"\x80\x04broken bytes")
    assert training_state.load(path, {}, None, None, None, None) is None
    assert "cannot be read" in caplog.text and "training starts again" in caplog.text
