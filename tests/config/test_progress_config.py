"""The progress section: its defaults, its refusals, and that it changes no run's identity."""

from __future__ import annotations

import pytest
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from conftest import compose_config, compose_job
from specbatch.config import ConfigError, ProgressDisplay, run_folder_digest


def test_progress_defaults_to_a_bar_in_a_terminal_and_a_line_every_30_seconds() -> None:
    job = compose_job()
    assert job.progress.display is ProgressDisplay.auto and job.progress.interval_seconds == 30


def test_progress_changes_no_run_folder() -> None:
    # How progress is shown changes nothing generated: a relaunch with other progress settings resumes the same run.
    plain, other = compose_job(), compose_job(["progress.display=lines", "progress.interval_seconds=5"])
    assert run_folder_digest(plain) == run_folder_digest(other)


@pytest.mark.parametrize("seconds", ["0", "-1"])
def test_a_progress_interval_that_is_not_positive_names_the_key_and_fix(seconds: str) -> None:
    with pytest.raises(ConfigError, match=r"progress.interval_seconds=-?\d.* must be more than 0 .* e.g. progress"):
        compose_job([f"progress.interval_seconds={seconds}"])


def test_an_unknown_progress_display_lists_the_choices() -> None:
    # on/off would be booleans in YAML 1.1: the choices say what is shown instead.
    with pytest.raises((HydraException, OmegaConfBaseException)) as err:
        compose_config(["progress.display=off"])
    text = "\n".join(str(e) for e in (err.value, err.value.__cause__) if e)
    assert "expected one of [auto, bar, lines]" in text
