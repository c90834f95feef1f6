"""The training's own arithmetic and files, without a model: speculators' learning-rate schedule, and a head written
whole (what a killed training left is removed, never read as a head)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specbatch.drafter.train import TRAINED_RECORD, TrainingData, TrainSettings, _save, learning_rate_factor


def test_the_rate_warms_up_over_the_first_hundredth_then_falls_to_zero() -> None:
    total = 1000
    factors = [learning_rate_factor(step, total) for step in range(total)]
    assert factors[0] == pytest.approx(0.1) and factors[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(factors[9:], factors[10:], strict=False))
    assert factors[-1] == pytest.approx(1 / 990)
    assert learning_rate_factor(0, 3) == 1.0  # a smoke test of 3 steps warms up in one


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
