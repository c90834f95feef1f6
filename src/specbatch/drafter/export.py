"""A finished run as speculators' training data for an EAGLE-3 head (jobs/export_drafter_data.py RUN OUT).

Each answered (row, turn, sample) of the run is one sequence: the exact token ids its engine was given (chat template
applied; a later turn's prompt holds the conversation so far) followed by the ones it generated, with ``loss_mask`` 1
on the generated tokens only, as speculators' own preprocessing makes one sequence per assistant turn. Beside each
sequence, the target's hidden states (specbatch.drafter.capture). The output is one speculators data folder per
shard of the run, each what speculators' loader (``speculators.train.data.ArrowDataset``) reads:

    OUT/export.json                          the run, its model, the layers captured, the shards
    OUT/shard-00000-of-00002/                datasets.save_to_disk: input_ids, loss_mask, seq_len (torch format)
        hidden_states/hs_<i>.safetensors     token_ids [T], hidden_states [T, aux layers + 1, hidden] (bfloat16)
        token_freq.pt                        {token id: count} over the generated tokens (the draft vocabulary)
        layers.json                          the layer id of each slot of hidden_states

A shard is built in a temporary folder and renamed into place whole, its marker written last inside it: a rerun
skips the shards that are there and builds the rest; a kill leaves no half shard (the next run removes the
temporary folder it left). What is refused, each in one line before the model loads: a run that is not finished or
damaged, one whose tokens no model sampled (spec=simulate, the dummy backend), a greedy run with several samples per
prompt (the same tokens n times), and an OUT that holds the export of another run or of other layers.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specbatch.common.atomic_files import atomic_write_json
from specbatch.common.errors import require
from specbatch.config import ConfigError
from specbatch.engine import not_a_models_answers
from specbatch.prediction.turns import ReplayTurn, read_turns
from specbatch.run.folder import read_run
from specbatch.run.status_merge import finished_summary

log = logging.getLogger(__name__)

EXPORT_RECORD = "export.json"
LAYERS_FILE = "layers.json"
TOKEN_FREQ = "token_freq.pt"
# Written last inside a shard's folder, before the folder is renamed into place.
DONE = ".done"
# What a shard's folder is built in (removed by the next run when a kill left it).
_BUILDING = ".building-"


def shard_name(index: int, count: int) -> str:
    return f"shard-{index:05d}-of-{count:05d}"


@dataclass(frozen=True)
class ExportResult:
    out: Path
    shards_written: int
    shards_kept: int
    sequences: int
    tokens: int
    seconds: float


def export_record(root: Path, config: dict[str, Any], shards: int, aux_layers: list[int] | None) -> dict[str, Any]:
    """What OUT/export.json holds: enough for a rerun to know it is the same export, and for training its target."""
    model = config["model"]
    return {
        "run": str(root),
        "model": {"name": model["name"], "path": model["path"], "revision": model.get("revision")},
        "aux_layers": aux_layers,
        "shards": shards,
    }


def check_exportable(root: Path) -> dict[str, Any]:
    """The run's recorded config when the run can be exported; one-line errors otherwise (before any model loads)."""
    finished_summary(root)
    config = read_run(root)["config"]
    # What the job refuses today (specbatch.config.sampling), found in a run recorded before that rule.
    sampling = config["sampling"]
    one_token = float(sampling["temperature"]) == 0 or int(sampling.get("top_k", 0)) == 1
    require(
        not (one_token and int(sampling.get("n", 1)) > 1),
        f"{root} chose one token at each step (sampling.temperature={sampling['temperature']}, top_k="
        f"{sampling.get('top_k')}) with sampling.n={sampling.get('n')}: its samples of a prompt are the same tokens, "
        "and the head would learn each one n times; export a run with sampling.n=1, or one that samples",
    )
    why = not_a_models_answers(config)
    require(
        why is None,
        f"{root} {why}, not the target's answers; export a run of a real method on a real backend (spec=none or any "
        "other, engine.backend=vllm)",
    )
    return config


def _check_out(out: Path, record: dict[str, Any]) -> None:
    """OUT is empty, new, or an earlier export of the same run with the same layers (resumed)."""
    path = out / EXPORT_RECORD
    if path.is_file():
        try:
            earlier = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{path} is damaged ({exc}): export into a new folder") from None
        require(
            earlier == record,
            f"{out} holds the export of {earlier.get('run')} (model {earlier.get('model', {}).get('name')}, layers "
            f"{earlier.get('aux_layers')}), not of this run with these layers: export into a new folder",
        )
        return
    others = [p.name for p in out.iterdir()] if out.is_dir() else []
    require(not others, f"{out} is not empty and holds no export ({', '.join(sorted(others)[:3])}): choose a new OUT")


# Where the hidden states are computed: transformers on the CPU, or vLLM on a GPU (specbatch.drafter.capture_vllm).
CAPTURES = ("transformers", "vllm")


def export_run(
    root: Path, out: Path, aux_layers: list[int] | None = None, capture: str = "transformers"
) -> ExportResult:
    """Export the finished run at ``root`` into ``out`` (module docstring); the shards already there are kept."""
    require(capture in CAPTURES, f"--capture {capture}: choose {' or '.join(CAPTURES)}")
    root, out = Path(root).resolve(), Path(out)
    config = check_exportable(root)
    turns = read_turns(root)
    shard_count = int(read_run(root)["shard_count"])
    record = export_record(root, config, shard_count, aux_layers)
    _check_out(out, record)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / EXPORT_RECORD, record)
    for left in out.glob(f"{_BUILDING}*"):
        # A shard a kill left half built: this export made it (its name), and nothing of it was kept.
        shutil.rmtree(left, ignore_errors=True)

    by_shard: dict[int, list[ReplayTurn]] = defaultdict(list)
    for turn in turns.turns:
        by_shard[turn.position[0]].append(turn)
    todo = [i for i in range(shard_count) if not (out / shard_name(i, shard_count) / DONE).is_file()]
    began = time.monotonic()
    sequences = tokens = 0
    if todo:
        model = config["model"]
        capturer = _capturer(capture, model, aux_layers)
        try:
            for index in todo:
                shard = sorted(by_shard.get(index, []), key=lambda t: t.position)
                n, t = _write_shard(out, shard_name(index, shard_count), shard, capturer)
                sequences, tokens = sequences + n, tokens + t
        finally:
            getattr(capturer, "close", lambda: None)()
    seconds = time.monotonic() - began
    log.info(
        "exported %d sequences (%d tokens) of %s into %s in %.1f s (%d shard(s) written, %d already there)",
        sequences,
        tokens,
        root,
        out,
        seconds,
        len(todo),
        shard_count - len(todo),
    )
    return ExportResult(out, len(todo), shard_count - len(todo), sequences, tokens, seconds)


def _capturer(capture: str, model: dict[str, Any], aux_layers: list[int] | None) -> Any:
    if capture == "vllm":
        from specbatch.drafter.capture_vllm import VllmHiddenStateCapture

        log.info("starting vLLM on %s to capture its hidden states (extract_hidden_states, on the GPU)", model["path"])
        return VllmHiddenStateCapture(model["path"], model.get("revision"), aux_layers)
    from specbatch.drafter.capture import HiddenStateCapture

    log.info("loading %s to capture its hidden states (float32, on the CPU)", model["path"])
    return HiddenStateCapture(model["path"], model.get("revision"), aux_layers)


# Sequences handed to the capture at once (vLLM batches them; transformers takes them one by one).
_CAPTURE_BATCH = 64


def _write_shard(out: Path, name: str, shard: list[ReplayTurn], capture: Any) -> tuple[int, int]:
    """One shard's speculators data folder, built aside and renamed into place; (sequences, tokens)."""
    import torch
    from datasets import Dataset
    from safetensors.torch import save_file
    from speculators.train.vocab_mapping import save_token_frequency_distribution
    from tqdm import tqdm

    building = out / f"{_BUILDING}{name}-{os.getpid()}"
    (building / "hidden_states").mkdir(parents=True)
    columns: dict[str, list[Any]] = {"input_ids": [], "loss_mask": [], "seq_len": []}
    with tqdm(total=len(shard), desc=f"capturing {name}", unit="seq", mininterval=2.0) as bar:
        for start in range(0, len(shard), _CAPTURE_BATCH):
            batch = shard[start : start + _CAPTURE_BATCH]
            every_ids = [[int(x) for x in turn.prompt] + [int(x) for x in turn.completion] for turn in batch]
            for offset, (turn, ids, states) in enumerate(zip(batch, every_ids, capture.many(every_ids), strict=True)):
                save_file(
                    {
                        "token_ids": torch.tensor(ids, dtype=torch.long),
                        "hidden_states": states.to(torch.bfloat16).contiguous(),
                    },
                    str(building / "hidden_states" / f"hs_{start + offset}.safetensors"),
                )
                columns["input_ids"].append(ids)
                columns["loss_mask"].append([0] * len(turn.prompt) + [1] * len(turn.completion))
                columns["seq_len"].append(len(ids))
            bar.update(len(batch))
    dataset = Dataset.from_dict(columns)
    dataset.set_format("torch")  # speculators' loader compares the rows with its hidden states as tensors
    dataset.save_to_disk(str(building))
    save_token_frequency_distribution(dataset, building / TOKEN_FREQ)
    (building / LAYERS_FILE).write_text(json.dumps({"layer_ids": capture.layer_ids, "hidden": capture.hidden_size}))
    (building / DONE).write_text("")
    os.replace(building, out / name)
    return len(shard), sum(columns["seq_len"])
