"""The learned heads this project builds for its embedded model: ``model_spec=smollm2_135m_eagle3`` points
``spec.model`` at one, built once per machine into the cache the first time a job asks for it.

A head's recipe is the hand-off a user runs on their own data, on packaged prompts (``dataset=drafter_train``):
regenerate the prompts' answers with the target (``jobs/generate.py``, spec=none, float32 greedy), export the run
with the target's hidden states (:mod:`specbatch.drafter.export`), train an EAGLE-3 head on it
(:mod:`specbatch.drafter.train`). The folder's name carries the recipe's version: a changed recipe builds a new
head instead of reading an old one.

Each step resumes: the regeneration is a run folder (a rerun finishes it), the export is per shard, the training goes
on from its last checkpoint (every 5 minutes: specbatch.drafter.training_state), and the head is trained into a work
folder and renamed into place with its ready marker, so the cache holds a whole head or none. The work folder
(``heads/.work-<data>``: the regenerated run, its export, about 2.6 GB) is named by the data, not the head: a recipe
that changes only the training reuses it and only trains. It is kept for retraining (the drafter bench trains its
smaller head on it) and may be deleted. Two jobs asking at once: the second waits for the first's build (a lock in the
work folder) and then reads its head.
"""

from __future__ import annotations

import ctypes
import fcntl
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from specbatch.assets.cache import (
    HEAD_BUILD_TIME,
    READY_MARKER,
    default_heads_dir,
    is_ready,
    unbuilt_embedded_head,
)
from specbatch.config import ConfigError
from specbatch.drafter.export import export_run
from specbatch.drafter.train import TrainSettings, read_exports, train_head

log = logging.getLogger(__name__)

PROJECT_ROOT = Path(__file__).resolve().parents[3]
# The regeneration's run folder is runs/<data set>/<model>/<RUN_NAME>-<digest>.
RUN_NAME = "regenerated"


@dataclass(frozen=True)
class HeadRecipe:
    """How one embedded head is made: the target and prompts regenerated, and the training."""

    name: str
    model: str
    # The regenerated data's name (its work folder's): recipes that differ only in training share it.
    data: str
    dataset: str = "drafter_train"
    max_samples: int | None = None
    max_tokens: int = 256
    settings: TrainSettings = field(default_factory=TrainSettings)

    def regenerate_overrides(self, output_root: Path) -> list[str]:
        """jobs/generate.py's overrides for the regeneration: the target's own answers, float32 greedy (the tokens
        vLLM's CPU build gives at any batch), batched wide for throughput, no MLflow run (a cache's work)."""
        return [
            f"model={self.model}",
            "model.dtype=float32",
            "spec=none",
            f"dataset={self.dataset}",
            f"max_samples={'null' if self.max_samples is None else self.max_samples}",
            "sampling=greedy",
            f"sampling.max_tokens={self.max_tokens}",
            "engine.max_num_seqs=64",
            "engine.cpu_kvcache_space_gib=4",
            "tracking=off",
            "progress.display=lines",
            f"run_name={RUN_NAME}",
            f"output_root={output_root}",
        ]


# Recipe 3: recipe 2's data (the writing tasks in the prompts, specbatch.assets.drafter_corpus) with the loss at the
# prompts' positions too, trained for 5 passes instead of 3 (on this little data more passes paid and more, smaller
# steps did not; docs/drafter.md).
SMOLLM2_EAGLE3 = HeadRecipe(
    name="smollm2-135m-eagle3-v3",
    model="smollm2_135m",
    data="smollm2-135m-drafter-train-v2",
    settings=TrainSettings(prompt_loss=True, epochs=5),
)
RECIPES = {recipe.name: recipe for recipe in (SMOLLM2_EAGLE3,)}


def work_dir(recipe: HeadRecipe) -> Path:
    return default_heads_dir() / f".work-{recipe.data}"


def ensure_embedded_head(path: str | Path | None) -> None:
    """Build the embedded head at ``path`` unless it is there (or another job built it while this one waited);
    nothing for any other path, or none."""
    if not unbuilt_embedded_head(path):
        return
    assert path is not None
    out = Path(path).expanduser()
    recipe = RECIPES[out.name]
    work = work_dir(recipe)
    with _build_lock(work, out):
        if is_ready(out):
            return
        log.warning(
            "building the EAGLE-3 head %s once for this machine into %s (%s: the target "
            "regenerates %s prompts, its hidden states are captured, the head trains; a stop keeps what is done, "
            "a rerun goes on from there)",
            recipe.name,
            out,
            HEAD_BUILD_TIME,
            "the " + recipe.dataset,
        )
        began = time.monotonic()
        build_head(recipe, out, work)
        log.info("the head %s took %.0f s to build: %s", recipe.name, time.monotonic() - began, out)


def build_head(recipe: HeadRecipe, out: Path, work: Path, settings: TrainSettings | None = None) -> Path:
    """Regenerate, export and train (each step resumed) and put the head at ``out`` with its ready marker."""
    export = export_of(recipe, work)
    trained = work / f"head-{out.name}"
    if not trained.exists():
        # A stop inside the training keeps its last checkpoint, and this goes on from it (drafter.training_state).
        train_head(read_exports([export]), trained, settings or recipe.settings)
    # train_head renames the head into place whole; a stop before its marker leaves a whole head to mark.
    (trained / READY_MARKER).write_text("")
    out.parent.mkdir(parents=True, exist_ok=True)
    os.replace(trained, out)
    return out


def export_of(recipe: HeadRecipe, work: Path) -> Path:
    """The recipe's regenerated run exported (both steps resumed): the training data of its heads."""
    runs = work / "regenerate"
    regenerate(recipe, runs)
    [run] = sorted(runs.glob(f"runs/*/*/{RUN_NAME}-*")) or [None]
    if run is None:
        raise ConfigError(f"the regeneration wrote no run folder under {runs}: delete {work} and build again")
    export = work / "export"
    export_run(run, export)
    return export


def regenerate(recipe: HeadRecipe, output_root: Path) -> None:
    """jobs/generate.py in a child process (its own Hydra, engine and signal handling), stopped if this one dies."""
    command = [sys.executable, str(PROJECT_ROOT / "jobs" / "generate.py"), *recipe.regenerate_overrides(output_root)]
    child = subprocess.Popen(command, cwd=PROJECT_ROOT, preexec_fn=_stop_with_parent)
    try:
        code = child.wait()
    except BaseException:
        child.send_signal(signal.SIGTERM)
        child.wait()
        raise
    if code != 0:
        raise ConfigError(
            f"regenerating the head's prompts stopped (exit {code}): rerun to go on where it stopped, or see the "
            f"lines above ({' '.join(command)})"
        )


def _stop_with_parent() -> None:
    """In the child, before exec: SIGTERM when the job that started it dies, even by kill -9 (Linux prctl)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@contextmanager
def _build_lock(work: Path, out: Path) -> Iterator[None]:
    work.mkdir(parents=True, exist_ok=True)
    with open(work / ".lock", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.warning("another job is building %s: waiting for it, then reading its head", out)
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        description="Build an embedded learned head into the cache now, not on first use."
    )
    parser.add_argument("name", nargs="?", default=SMOLLM2_EAGLE3.name, choices=sorted(RECIPES))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    path = default_heads_dir() / args.name
    try:
        ensure_embedded_head(path)
    except ConfigError as exc:
        log.error("%s", exc)
        return 2
    log.info("head ready at %s", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
