"""A head's acceptance on exported runs without an engine (jobs/eval_drafter.py HEAD DATA [DATA ...]): what a
held-out export says about a head in a minute, where a vLLM run of the same rows takes several.

The head drafts ``k`` tokens ahead at every generated position of the data, as in its training (speculators' forward,
its tokens teacher-forced: once a draft token is wrong the later ones do not count, so feeding the right token
changes nothing counted). At position i it counts as accepted when it is the target's own greedy choice there (the
argmax of the target's distribution, the token a float32 greedy run generated) and every earlier one was. So
``accepted[i]`` is the acceptance at draft position i under greedy verification, and ``1 + sum(accepted)`` the mean
tokens a step would give if a step could start at any position. A run's AL counts the steps it made, which start
where the last one's drafts were rejected, where drafting is harder: expect it a little lower (about 0.08 at k 3 on
chat for the embedded head).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specbatch.assets.checkpoints import read_model_config
from specbatch.common.errors import require
from specbatch.drafter.train import read_exports


@dataclass(frozen=True)
class HeadAcceptance:
    """Acceptance per draft position over ``positions`` generated positions of ``sequences`` sequences."""

    sequences: int
    positions: int
    accepted: list[float]

    @property
    def acceptance_length(self) -> float:
        return 1.0 + sum(self.accepted)


def _verifier_of(head: Path) -> str:
    """The target a speculators-format EAGLE-3 head drafts for, from its config (read, and refused when damaged,
    as every checkpoint's config is: assets.checkpoints); one-line errors else."""
    from speculators.models.eagle3 import Eagle3SpeculatorConfig

    wanted = Eagle3SpeculatorConfig.model_fields["speculators_model_type"].default
    advice = "name a folder jobs/train_drafter.py wrote"
    config = read_model_config("HEAD", str(head)) if head.is_dir() else None
    require(config is not None, f"{head} is not a head (no config.json): {advice}")
    assert config is not None
    found = config.get("speculators_model_type")
    require(found == wanted, f"{head} is not a speculators {wanted} head (speculators_model_type {found!r}): {advice}")
    return str(config["speculators_config"]["verifier"]["name_or_path"])


def evaluate_head(head: Path, exports: list[Path], k: int = 3, max_sequences: int | None = None) -> HeadAcceptance:
    """``head``'s acceptance per draft position at k on the generated positions of ``exports`` (module docstring)."""
    import torch
    from speculators.losses import resolve_loss_config
    from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig
    from speculators.models.eagle3.data import shift_batch
    from speculators.train.data import ArrowDataset, CollateFn

    require(k >= 1, f"--k {k}: draft 1 or more tokens ahead")
    head = Path(head)
    verifier = _verifier_of(head)
    data = read_exports(exports)
    require(
        Path(verifier).resolve() == Path(data.model["path"]).resolve(),
        f"{head} drafts for {verifier}, but the data comes from runs of {data.model['path']}: evaluate a head on "
        "exports of runs of its own target",
    )
    config = Eagle3SpeculatorConfig.from_pretrained(str(head))
    # SDPA: FlexAttention has no CPU path here; the same attention, as in training.
    config.transformer_layer_config._attn_implementation = "sdpa"
    model = Eagle3DraftModel.from_pretrained(str(head), config=config).eval()
    aux = len(data.layer_ids) - 1
    loss_config = resolve_loss_config("kl_div", "eager")
    sums = [0.0] * k
    positions = sequences = 0
    with torch.no_grad():
        for shard in data.shards:
            dataset = ArrowDataset(
                max_len=1 << 20, datapath=str(shard), on_missing="raise", hidden_states_dtype=torch.float32
            )
            for index in range(len(dataset)):
                if max_sequences is not None and sequences >= max_sequences:
                    break
                sample = dataset[index]
                # speculators' collation pads every step to its max_len: one sequence, its own length.
                collate = CollateFn(
                    max_len=len(sample["input_ids"]),
                    hidden_size=data.hidden_size,
                    num_target_layers=aux,
                    dtype=torch.float32,
                    preprocess=shift_batch,
                )
                batch = {key: v for key, v in collate([sample]).items() if torch.is_tensor(v)}
                _, _, metrics = model(**batch, ttt_steps=k, ttt_step_loss_decay=1.0, loss_config=loss_config)
                for step in range(k):
                    sums[step] += float(metrics[f"full_acc_{step}_sum"])
                positions += int(metrics["full_acc_0_total"])
                sequences += 1
    require(positions > 0, f"the data {', '.join(map(str, exports))} has no generated position to draft at")
    # Over every position a step could start at: a draft past the sequence's end counts as not accepted, so
    # 1 + sum(accepted) is the mean tokens of a step started anywhere (speculators' own ratio divides each position
    # by the positions that have a token there, a little higher at the later positions).
    return HeadAcceptance(sequences, positions, [s / positions for s in sums])
