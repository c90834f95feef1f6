"""A head's training saved as it goes, so that a stop keeps what is trained (specbatch.drafter.train).

The embedded head trains for about 83 minutes on 2 cores; before this, a stop anywhere in them (a killed job, the end
of a Slurm allocation) started the training again from its first step. Every ``CHECKPOINT_SECONDS`` the training
writes everything its next step depends on beside OUT (``.<OUT>.checkpoint.pt``): the head's weights, the optimiser's
moments, the learning-rate schedule's place, the random states (the epoch's shuffle, the feature noise, torch's own)
and the steps done. The same command run again (jobs/train_drafter.py, jobs/build_head.py, a job that builds the
embedded head) goes on from there, through the same steps in the same order. The file is written aside and renamed,
so it is whole or absent; it is deleted once the head is in place. A checkpoint of other data or other settings is
not resumed from: that training starts again, and says why.
"""

from __future__ import annotations

import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

log = logging.getLogger(__name__)

# Seconds of training between checkpoints: a stop loses at most this much. A checkpoint of the embedded head (its
# weights and AdamW's two moments, 212 MB) takes a second or two to write.
CHECKPOINT_SECONDS = 300.0


@dataclass
class Progress:
    """Where a training is: the epoch it is in, its steps done there, the shuffle's random state at that epoch's
    start (so the epoch's order is dealt again), and what the finished steps gave."""

    epoch: int
    done_in_epoch: int
    epoch_rng: Any
    losses: list[float]
    tokens: int
    seconds: float


def writer_gone(pid: str) -> bool:
    """Whether the process a leftover's name holds (the pid of the training that wrote it) is gone: only then is the
    leftover removed, since a live one is another training still writing."""
    return pid.isdigit() and not psutil.pid_exists(int(pid))


def checkpoint_path(out: Path) -> Path:
    """Where a training of ``out`` keeps its checkpoint: beside it, hidden."""
    return out.with_name(f".{out.name}.checkpoint.pt")


def fingerprint(exports: list[Path], runs: list[str], settings: Any) -> dict[str, Any]:
    """What a checkpoint must have been trained on and how, to be resumed from."""
    return {"exports": [str(p) for p in exports], "runs": list(runs), "settings": asdict(settings)}


def save(
    path: Path, key: dict[str, Any], model: Any, optimizer: Any, schedule: Any, noise: Any, done: Progress
) -> None:
    """Write the checkpoint aside and rename it into place (whole or absent)."""
    import torch

    state = {
        "fingerprint": key,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "schedule": schedule.state_dict(),
        "noise": noise.get_state(),
        "torch_rng": torch.get_rng_state(),
        "progress": asdict(done),
    }
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    torch.save(state, partial)
    os.replace(partial, path)
    log.info("checkpoint after %d training steps: %s", len(done.losses), path)


def load(path: Path, key: dict[str, Any], model: Any, optimizer: Any, schedule: Any, noise: Any) -> Progress | None:
    """Restore a checkpoint of the same data and settings into the training's objects; its progress, or None (no
    checkpoint, a damaged one, or one of another training: each said in a line)."""
    import torch

    for left in path.parent.glob(f"{path.name}.*.partial"):
        # A checkpoint a stop cut off while writing (its process is gone): never read. A live one's is its own.
        if writer_gone(left.name[len(path.name) + 1 : -len(".partial")]):
            left.unlink(missing_ok=True)
    if not path.is_file():
        return None
    try:
        # Our own file (optimiser state holds plain Python values, so not weights_only).
        state = torch.load(path, weights_only=False)
    except Exception as exc:  # noqa: BLE001 - any damage means: train from the start
        log.warning("the checkpoint %s cannot be read (%s): training starts again", path, exc)
        return None
    if state.get("fingerprint") != key:
        log.warning("the checkpoint %s is of other data or settings: training starts again", path)
        return None
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    schedule.load_state_dict(state["schedule"])
    noise.set_state(state["noise"])
    torch.set_rng_state(state["torch_rng"])
    done = Progress(**state["progress"])
    log.info("resuming the training from %s after %d steps", path, len(done.losses))
    return done
