"""An EAGLE-3 head trained on exported runs (jobs/train_drafter.py DATA [DATA ...] OUT), written in speculators'
format, which vLLM loads as it is (``spec=eagle3 spec.model=OUT``).

The model is speculators' own (``speculators.models.eagle3.Eagle3DraftModel``, built as ``speculators train`` builds
it: one Llama decoder layer on the target's config, the draft vocabulary of the tokens the target generated most
often), and so is its data loader and loss. The loop is ours, short: speculators' Trainer assumes an accelerator
(it moves the model to device 0 and synchronises it every logged step) and would run on the CPU only with two
process-wide patches (a private global of its own and ``torch.accelerator.synchronize``). On the CPU the head trains
in float32 with SDPA attention (FlexAttention has no backward there) and the eager loss (the fused one is Triton's).

Sequences are packed, in order, into steps of at most ``tokens_per_step`` tokens (attention over the packed tokens
grows with their square: about 1,000 tokens a step keeps a CPU step near a second), shuffled by step with a seeded
generator, for ``epochs`` passes. The head is saved in a temporary folder and renamed into place: OUT holds a whole
checkpoint or none. Every few minutes the training's state is saved beside OUT, and the same command run again after
a stop goes on from it (specbatch.drafter.training_state).
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from specbatch.common.errors import require
from specbatch.config import ConfigError
from specbatch.drafter import training_state
from specbatch.drafter.export import DONE, EXPORT_RECORD, LAYERS_FILE, TOKEN_FREQ, shard_name

log = logging.getLogger(__name__)

# A file of ours beside speculators' own, saying what the head was trained on and how.
TRAINED_RECORD = "specbatch_head.json"


@dataclass(frozen=True)
class TrainSettings:
    """How the head is trained: speculators' defaults for EAGLE-3 (AdamW at 1e-3 with weight decay 0.01, the rate
    warmed up over the first 1 % of steps and decayed linearly to 0), with fewer epochs than its 20 (a CPU's)."""

    epochs: int = 3
    learning_rate: float = 1e-3
    weight_decay: float = 0.01
    # Tokens packed into one step (every sequence is whole in one step; a longer one is cut to this).
    tokens_per_step: int = 1024
    # Tokens of the draft's own vocabulary: the ones the target generated most often in the data.
    draft_vocab_size: int = 8192
    # Steps the head is trained to draft ahead of itself (test-time training), as speculators' default.
    ttt_steps: int = 3
    seed: int = 0
    # Stop after this many steps (a smoke test); None: every epoch.
    max_steps: int | None = None
    # Train on the data's first N sequences only (a data-size study); None: all of them.
    max_sequences: int | None = None
    # Learn at the prompt's positions too, not only at the generated ones. The loss is the KL divergence to the
    # target's own next-token distribution, which the capture holds at every position, so the prompt's tokens are
    # free training signal (no generation, no capture): about 1.7x the positions of a chat-like corpus. Off in
    # speculators (loss_mask 1 on generated tokens only).
    prompt_loss: bool = False
    # Gaussian noise added to each captured layer's hidden state, as a share of its own root mean square (EAGLE's
    # feature noise, a regulariser for a head trained on little data); 0: none.
    feature_noise: float = 0.0

    def __post_init__(self) -> None:
        require(self.epochs >= 1, f"--epochs {self.epochs}: train for 1 or more")
        require(self.learning_rate > 0, f"--learning-rate {self.learning_rate}: must be more than 0")
        require(self.tokens_per_step >= 64, f"--tokens-per-step {self.tokens_per_step}: take 64 or more (e.g. 1024)")
        require(0 <= self.feature_noise < 1, f"--feature-noise {self.feature_noise}: a share from 0 (none) to below 1")
        require(self.draft_vocab_size >= 1, f"--draft-vocab-size {self.draft_vocab_size}: take 1 or more")
        require(self.max_steps is None or self.max_steps >= 1, f"--max-steps {self.max_steps}: take 1 or more")
        require(
            self.max_sequences is None or self.max_sequences >= 1,
            f"--max-sequences {self.max_sequences}: take 1 or more",
        )


@dataclass(frozen=True)
class TrainingData:
    """What training reads from exported runs: their shards (speculators data folders) and the target."""

    exports: list[Path]
    shards: list[Path]
    model: dict[str, Any]
    layer_ids: list[int]
    hidden_size: int
    runs: list[str]


def read_exports(exports: list[Path]) -> TrainingData:
    """The shards of finished exports of runs of one model, captured at the same layers; one-line errors else."""
    shards: list[Path] = []
    models, layers, runs = [], [], []
    for export in exports:
        path = Path(export) / EXPORT_RECORD
        try:
            record = json.loads(path.read_text())
        except FileNotFoundError:
            raise ConfigError(
                f"{export} is not an export (no {EXPORT_RECORD}): make one with jobs/export_drafter_data.py RUN OUT"
            ) from None
        except ValueError as exc:
            raise ConfigError(f"{path} is damaged ({exc}): export the run again into a new folder") from None
        names = [shard_name(i, int(record["shards"])) for i in range(int(record["shards"]))]
        missing = [n for n in names if not (Path(export) / n / DONE).is_file()]
        if missing:
            raise ConfigError(
                f"{export}: {len(missing)} of {len(names)} shards are not exported ({missing[0]}, ...): rerun "
                f"jobs/export_drafter_data.py {record['run']} {export} to finish them"
            )
        for name in names:
            shards.append(Path(export) / name)
            layers.append(json.loads((Path(export) / name / LAYERS_FILE).read_text()))
        models.append(record["model"])
        runs.append(record["run"])
    require(bool(exports), "no export given: name at least one folder jobs/export_drafter_data.py wrote")
    require(
        all(m["path"] == models[0]["path"] for m in models),
        "the exports come from runs of different models ("
        + ", ".join(sorted({m["name"] for m in models}))
        + "): a head drafts for one target; train on exports of runs of one model",
    )
    require(
        all(layer == layers[0] for layer in layers),
        f"the exports captured different layers ({layers[0]} and others): export them with the same --aux-layers",
    )
    return TrainingData(list(exports), shards, models[0], layers[0]["layer_ids"], int(layers[0]["hidden"]), runs)


def token_frequencies(shards: list[Path]) -> dict[int, int]:
    """How often the target generated each token, over every shard (the draft vocabulary is chosen from it)."""
    import torch

    total: Counter[int] = Counter()
    for shard in shards:
        total.update({int(k): int(v) for k, v in torch.load(shard / TOKEN_FREQ).items()})
    return dict(total)


def _steps(lengths: list[int], tokens_per_step: int) -> list[list[int]]:
    """Consecutive sequences packed into steps of at most ``tokens_per_step`` tokens (a longer one alone)."""
    steps: list[list[int]] = []
    current: list[int] = []
    used = 0
    for index, length in enumerate(lengths):
        length = min(length, tokens_per_step)
        if current and used + length > tokens_per_step:
            steps.append(current)
            current, used = [], 0
        current.append(index)
        used += length
    if current:
        steps.append(current)
    return steps


def learning_rate_factor(step: int, total: int) -> float:
    """The learning rate's share at ``step`` of ``total``: speculators' linear schedule (warm-up over the first 1 %
    of the steps, at least one, then down to 0 at the last)."""
    warmup = max(1, total // 100)
    if step < warmup:
        return (step + 1) / warmup
    return max(0.0, (total - step) / max(1, total - warmup))


def training_batch(
    batch: dict[str, Any], settings: TrainSettings, layers: int = 3, generator: Any = None
) -> dict[str, Any]:
    """The collated step as the model takes it: its tensors, with the loss at every real position (not padding)
    when ``settings.prompt_loss``, else at the generated ones only; with ``settings.feature_noise``, noise on each of
    the ``layers`` hidden states that are concatenated in ``hidden_states``."""
    import torch

    batch = {k: v for k, v in batch.items() if torch.is_tensor(v)}
    if settings.prompt_loss:
        batch["loss_mask"] = (batch["document_ids"] != -1).to(batch["loss_mask"].dtype)
    if settings.feature_noise > 0:
        states = batch["hidden_states"]
        chunks = states.unflatten(-1, (layers, -1))
        scale = chunks.pow(2).mean(-1, keepdim=True).sqrt() * settings.feature_noise
        noise = torch.randn(chunks.shape, generator=generator, dtype=chunks.dtype) * scale
        batch["hidden_states"] = (chunks + noise).flatten(-2)
    return batch


@dataclass
class TrainResult:
    out: Path
    steps: int
    tokens: int
    seconds: float
    losses: list[float]


def train_head(
    data: TrainingData,
    out: Path,
    settings: TrainSettings,
    on_step: Callable[[int, float, dict[str, float]], None] | None = None,
) -> TrainResult:
    """Train an EAGLE-3 head on ``data`` and save it at ``out`` in speculators' format (module docstring).
    ``on_step(step, loss, metrics)`` sees every step (the MLflow run's loss curve); a training resumed from its
    checkpoint first replays the steps done before the stop, with their losses and no metrics (the checkpoint keeps
    the losses only), so the curve of the run that finishes the head starts at step 1."""
    import torch
    from speculators.losses import resolve_loss_config
    from speculators.models.eagle3 import Eagle3DraftModel
    from speculators.models.eagle3.data import shift_batch
    from speculators.train.cli import create_transformer_layer_config
    from speculators.train.data import ArrowDataset, CollateFn
    from speculators.train.vocab_mapping import build_vocab_mappings_from_distribution
    from torch.utils.data import ConcatDataset
    from tqdm import tqdm

    out = Path(out)
    require(not out.exists(), f"{out} exists: the head is written into a new folder (choose another OUT)")
    torch.manual_seed(settings.seed)
    verifier = data.model["path"]
    aux = data.layer_ids[:-1]
    layer_config = create_transformer_layer_config(
        verifier, num_layers=1, draft_arch="llama", hidden_act=None, sliding_window=2048, full_attention_indices=[0]
    )
    target_vocab = int(layer_config.vocab_size)
    draft_vocab = min(settings.draft_vocab_size, target_vocab)
    d2t, t2d = build_vocab_mappings_from_distribution(token_frequencies(data.shards), draft_vocab, target_vocab)
    model = Eagle3DraftModel.from_training_args(
        verifier_config=layer_config,
        t2d=t2d,
        d2t=d2t,
        draft_vocab_size=draft_vocab,
        # speculators train's EAGLE-3 defaults.
        norm_before_residual=True,
        norm_before_fc=True,
        norm_output=True,
        ttt_steps=settings.ttt_steps,
        verifier_name_or_path=verifier,
        target_layer_ids=aux,
        draft_attn_impl="sdpa",
    )
    datasets = [
        ArrowDataset(
            max_len=settings.tokens_per_step,
            datapath=str(shard),
            on_missing="raise",
            hidden_states_dtype=torch.float32,
        )
        for shard in data.shards
    ]
    dataset = ConcatDataset(datasets)
    lengths = [length for d in datasets for length in d.approx_lengths][: settings.max_sequences]
    collate = CollateFn(
        max_len=settings.tokens_per_step,
        hidden_size=data.hidden_size,
        num_target_layers=len(aux),
        dtype=torch.float32,
        preprocess=shift_batch,
    )
    loss_config = resolve_loss_config("kl_div", "eager")
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=settings.learning_rate, weight_decay=settings.weight_decay)
    steps = _steps(lengths, settings.tokens_per_step)
    total = len(steps) * settings.epochs
    if settings.max_steps is not None:
        total = min(total, settings.max_steps)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: learning_rate_factor(step, total))
    log.info(
        "training an EAGLE-3 head for %s on %d sequences (%d tokens) of %d run(s): %d trainable parameters, %d steps",
        data.model["name"],
        len(lengths),
        sum(lengths),
        len(data.runs),
        sum(p.numel() for p in trainable),
        total,
    )
    rng = random.Random(settings.seed)
    noise = torch.Generator().manual_seed(settings.seed)
    checkpoint = training_state.checkpoint_path(out)
    key = training_state.fingerprint(data.exports, data.runs, settings)
    done = training_state.load(checkpoint, key, model, optimizer, schedule, noise)
    if done is None:
        done = training_state.Progress(0, 0, None, [], 0, 0.0)
    else:
        rng.setstate(done.epoch_rng)
        if on_step is not None:
            for step, loss in enumerate(done.losses, start=1):
                on_step(step, loss, {})
    losses = done.losses
    began = time.monotonic() - done.seconds
    saved = time.monotonic()
    model.train()
    with tqdm(total=total, initial=len(losses), desc="training the head", unit="step", mininterval=2.0) as bar:
        for epoch in range(done.epoch, settings.epochs):
            epoch_rng = rng.getstate()
            order = list(steps)
            rng.shuffle(order)
            # A resumed epoch deals the same order again and skips the steps its checkpoint had done.
            skip = done.done_in_epoch if epoch == done.epoch else 0
            for position, indices in enumerate(order[skip:], start=skip):
                if len(losses) >= total:
                    break
                batch = training_batch(collate([dataset[i] for i in indices]), settings, len(aux), noise)
                _, loss, metrics = model(
                    **batch, ttt_steps=settings.ttt_steps, ttt_step_loss_decay=1.0, loss_config=loss_config
                )
                optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(trainable, 1.0)
                optimizer.step()
                schedule.step()
                losses.append(float(loss.item()))
                done.tokens += int((batch["document_ids"] != -1).sum())
                bar.set_postfix(loss=f"{losses[-1]:.3f}")
                bar.update()
                if on_step is not None:
                    on_step(len(losses), losses[-1], _accuracies(metrics))
                if time.monotonic() - saved >= training_state.CHECKPOINT_SECONDS and len(losses) < total:
                    where = training_state.Progress(
                        epoch, position + 1, epoch_rng, losses, done.tokens, time.monotonic() - began
                    )
                    training_state.save(checkpoint, key, model, optimizer, schedule, noise, where)
                    saved = time.monotonic()
    seconds = time.monotonic() - began
    model.eval()
    _save(model, out, data, settings, losses, done.tokens, seconds)
    checkpoint.unlink(missing_ok=True)
    log.info("trained in %.1f s (%d tokens, last loss %.3f): %s", seconds, done.tokens, losses[-1], out)
    return TrainResult(out, len(losses), done.tokens, seconds, losses)


def _accuracies(metrics: dict[str, Any]) -> dict[str, float]:
    """speculators' per-position accuracies from their sums and totals (``full_acc_<k>_sum`` / ``_total``)."""
    found = {}
    for key, value in metrics.items():
        if key.endswith("_sum") and "acc" in key:
            base = key[: -len("_sum")]
            count = float(metrics.get(f"{base}_total", 0))
            if count:
                found[base] = float(value) / count
    return found


def _save(
    model: Any,
    out: Path,
    data: TrainingData,
    settings: TrainSettings,
    losses: list[float],
    tokens: int,
    seconds: float,
) -> None:
    """The head in speculators' format, and our record beside it, in a temporary folder renamed into place."""
    for left in out.parent.glob(f".{out.name}.building-*"):
        # What a killed training of this OUT left (its process is gone): never a whole head.
        if training_state.writer_gone(left.name.rsplit("-", 1)[-1]):
            shutil.rmtree(left, ignore_errors=True)
    building = out.with_name(f".{out.name}.building-{os.getpid()}")
    shutil.rmtree(building, ignore_errors=True)
    model.save_pretrained(str(building))
    record = {
        "exports": [str(p) for p in data.exports],
        "runs": data.runs,
        "model": data.model,
        "layer_ids": data.layer_ids,
        "settings": asdict(settings),
        "steps": len(losses),
        "tokens": tokens,
        "seconds": round(seconds, 1),
        "first_loss": losses[0],
        "last_loss": losses[-1],
    }
    (building / TRAINED_RECORD).write_text(json.dumps(record, indent=2) + "\n")
    out.parent.mkdir(parents=True, exist_ok=True)
    os.replace(building, out)
