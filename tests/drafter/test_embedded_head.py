"""The embedded model's learned head (model_spec=smollm2_135m_eagle3): where it lives, built on first use only for
the preset's own folder, one build when two jobs ask at once, spec=auto leaving it out until it is built, and the
regeneration's child stopped with the job that started it. The build's steps themselves run for real in
tests/drafter/test_drafter_cpu.py; the whole recipe (about 135 minutes) runs in jobs/bench.py --drafter."""

from __future__ import annotations

import dataclasses
import logging
import os
import runpy
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from conftest import PROJECT_ROOT
from specbatch.assets.cache import EMBEDDED_HEADS, READY_MARKER, unbuilt_embedded_head
from specbatch.auto.candidates import candidates
from specbatch.config import ConfigError
from specbatch.config.compose import compose_job
from specbatch.drafter import embedded_head
from specbatch.drafter.embedded_head import RECIPES, SMOLLM2_EAGLE3, ensure_embedded_head, work_dir
from specbatch.drafter.train import TrainSettings


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPECBATCH_CACHE", str(tmp_path))
    return tmp_path


def _built(cache: Path) -> Path:
    head = cache / "heads" / SMOLLM2_EAGLE3.name
    head.mkdir(parents=True)
    (head / READY_MARKER).write_text("")
    return head


def test_the_preset_names_the_recipes_folder_in_the_cache(cache: Path) -> None:
    assert sorted(RECIPES) == sorted(EMBEDDED_HEADS)
    job = compose_job(["spec=eagle3"])
    assert job.spec.model == str(cache / "heads" / "smollm2-135m-eagle3-v3")
    assert unbuilt_embedded_head(job.spec.model)
    assert not unbuilt_embedded_head("/elsewhere/smollm2-135m-eagle3-v3") and not unbuilt_embedded_head(None)
    _built(cache)
    assert not unbuilt_embedded_head(job.spec.model)


def test_the_regeneration_is_a_job_of_the_project(tmp_path: Path) -> None:
    job = compose_job(SMOLLM2_EAGLE3.regenerate_overrides(tmp_path / "work"))
    assert (job.dataset.name, job.model.dtype, job.spec.method.value, job.max_samples) == (
        "drafter_train",
        "float32",
        "none",
        None,
    )
    assert job.sampling.temperature == 0 and job.sampling.max_tokens == 256


def test_only_an_unbuilt_embedded_head_is_built_and_once(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[Path] = []

    def build(recipe, out: Path, work: Path, settings=None) -> Path:
        built.append(out)
        out.mkdir(parents=True)
        (out / READY_MARKER).write_text("")
        return out

    monkeypatch.setattr(embedded_head, "build_head", build)
    ensure_embedded_head("/some/other/head")
    ensure_embedded_head(None)
    assert built == []
    head = cache / "heads" / SMOLLM2_EAGLE3.name
    ensure_embedded_head(head)
    ensure_embedded_head(head)
    assert built == [head] and (head / READY_MARKER).is_file()


def test_a_second_job_waits_for_the_first_ones_build(
    cache: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    started, release = threading.Event(), threading.Event()
    built: list[Path] = []

    def build(recipe, out: Path, work: Path, settings=None) -> Path:
        built.append(out)
        started.set()
        assert release.wait(60)
        out.mkdir(parents=True)
        (out / READY_MARKER).write_text("")
        return out

    monkeypatch.setattr(embedded_head, "build_head", build)
    head = cache / "heads" / SMOLLM2_EAGLE3.name
    first = threading.Thread(target=ensure_embedded_head, args=(head,))
    first.start()
    assert started.wait(60)
    second = threading.Thread(target=ensure_embedded_head, args=(head,))
    with caplog.at_level(logging.WARNING):
        second.start()
        deadline = time.monotonic() + 60
        while "another job is building" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.05)
    assert "another job is building" in caplog.text
    release.set()
    first.join(60)
    second.join(60)
    assert built == [head]


def test_auto_weighs_the_head_once_it_is_built(cache: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        labels = [c.label for c in candidates(compose_job(["spec=auto"]))]
    assert "eagle3-k3" not in labels and "spec=auto leaves eagle3 out" in caplog.text
    with pytest.raises(ConfigError, match="eagle3-k3 drafts with .* not built on this machine yet"):
        candidates(compose_job(["spec=auto", "spec.auto.candidates=[none,eagle3-k3]"]))
    _built(cache)
    auto = candidates(compose_job(["spec=auto"]))
    [eagle3] = [c for c in auto if c.label == "eagle3-k3"]
    assert eagle3.spec == compose_job(["spec=eagle3"]).spec  # what spec=eagle3 runs on this model


def test_the_regeneration_stops_when_the_job_that_started_it_is_killed(tmp_path: Path) -> None:
    """kill -9 of the job: its regeneration child gets SIGTERM from the kernel (no process outlives the job)."""
    script = tmp_path / "parent.py"
    script.write_text(
        "import subprocess, sys\n"
        "from specbatch.drafter.embedded_head import _stop_with_parent\n"
        "sleep = [sys.executable, '-c', 'import time; time.sleep(600)']\n"
        "child = subprocess.Popen(sleep, preexec_fn=_stop_with_parent)\n"
        "print(child.pid, flush=True)\n"
        "child.wait()\n"
    )
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = psutil.Process(int(parent.stdout.readline()))
    assert child.is_running()
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait(30)
    child.wait(60)  # psutil.TimeoutExpired if it outlived the job (a grandchild's exit code is not ours to read)
    assert not child.is_running()


def test_a_job_builds_the_head_it_names_before_anything_else(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from specbatch.pipeline import run_job

    class Building(Exception):
        pass

    def build(recipe, out: Path, work: Path, settings=None) -> Path:
        raise Building(out)

    monkeypatch.setattr(embedded_head, "build_head", build)
    job = compose_job(["spec=eagle3", "engine.backend=dummy", "tracking=off", f"output_root={tmp_path / 'out'}"])
    with pytest.raises(Building):
        run_job(job)
    assert not (tmp_path / "out" / "runs").exists()


def test_a_server_of_the_head_builds_it_before_it_starts(
    cache: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """jobs/serve.py spec=eagle3 builds the head as a batch job would (vLLM would fail on a missing folder), and
    --print only prints the commands that name it."""
    from specbatch.backends.vllm.vllm_server import VllmServer

    class Building(Exception):
        pass

    def build(recipe, out: Path, work: Path, settings=None) -> Path:
        raise Building(out)

    def start(job):  # noqa: ANN001, ANN202 - never reached: the build comes first
        raise AssertionError("the server started before the head was built")

    monkeypatch.setattr(embedded_head, "build_head", build)
    monkeypatch.setattr(VllmServer, "start", start)
    serve = str(PROJECT_ROOT / "jobs" / "serve.py")
    monkeypatch.setattr(sys, "argv", [serve, "--print", "spec=eagle3"])
    with pytest.raises(SystemExit) as printed:
        runpy.run_path(serve, run_name="__main__")
    assert printed.value.code == 0 and SMOLLM2_EAGLE3.name in capsys.readouterr().out
    monkeypatch.setattr(sys, "argv", [serve, "spec=eagle3"])
    with pytest.raises(Building, match=SMOLLM2_EAGLE3.name):
        runpy.run_path(serve, run_name="__main__")


def test_a_recipe_that_changes_only_the_training_reuses_the_regenerated_data(cache: Path) -> None:
    """The work folder (regenerated run, export) is named by the data: a new head of the same data only trains."""
    retrained = dataclasses.replace(
        SMOLLM2_EAGLE3, name="smollm2-135m-eagle3-v99", settings=TrainSettings(prompt_loss=True, epochs=9)
    )
    assert work_dir(retrained) == work_dir(SMOLLM2_EAGLE3) == cache / "heads" / f".work-{SMOLLM2_EAGLE3.data}"
    other_data = dataclasses.replace(SMOLLM2_EAGLE3, data="smollm2-135m-drafter-train-v99")
    assert work_dir(other_data) != work_dir(SMOLLM2_EAGLE3)
