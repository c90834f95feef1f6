"""(l) A trained EAGLE-3 head for the embedded model, measured: ``jobs/bench.py --drafter [--rows 48] [--stamp S]``.

The heads: the embedded head (``model_spec=smollm2_135m_eagle3``: the target regenerates the 2,436 packaged
``dataset=drafter_train`` prompts, float32 greedy, its hidden states are exported, the head trains; built into the
cache unless it is there) and a smaller one trained the same way on the first half of the same sequences. None of
their prompts is an evaluation prompt.

Then on held-out prompts of two kinds, chat (``dataset=chat``: MT-Bench's questions and translations) and code
(``dataset=humaneval_edit``), float32, ``--rows`` rows each, 128 new tokens:

- acceptance: each head at k 1, 3 and 5, AL and acceptance per position (the engine's counters);
- token equality: every completion of each head's run against spec=none's on the same rows (float32 greedy);
- tok/s on chat (its first 16 rows) at batch 1, 4 and 16 (``engine.max_num_seqs``): spec=none, n-gram k3 and the
  larger head at k3, the set-ups alternating within each batch, one run each; beside each, the mean engine step
  from the run's step timing: where the head is not faster than spec=none, n-gram k3's step (verifying 4 tokens a
  sequence, its lookup nearly free) against the head's says how much of the head's step is its 3 draft passes;
- the lossless verdict of the larger head at temperature 0.7 (``jobs/check_lossless.py``'s check), on 120 rows.

Finished runs under ``--stamp`` are read, not run again (a run stopped part way is run again whole).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from specbatch.assets.cache import default_heads_dir
from specbatch.bench import machine_header
from specbatch.bench.processes import run_generate
from specbatch.drafter.embedded_head import SMOLLM2_EAGLE3, ensure_embedded_head, work_dir
from specbatch.drafter.train import TRAINED_RECORD, read_exports, train_head
from specbatch.run.folder import shard_folders
from specbatch.run.step_log import bucket_totals

log = logging.getLogger(__name__)

WORKLOADS = {"chat": ["dataset=chat"], "code": ["dataset=humaneval_edit"]}
COMMON = ["model.dtype=float32", "sampling=greedy", "tracking=off", "engine.warmup=false"]
GOAL_AL = 1.6
DONE_FILE = "bench-run.json"


@dataclass(frozen=True)
class DrafterPlan:
    rows: int = 48
    # Rows of each tok/s run (batch 1 generates them one at a time).
    speed_rows: int = 16
    # Rows of the sampled run the lossless check scores: about 13,000 tokens (100 rows fell 150 short of what
    # catches a temperature 3 % off).
    lossless_rows: int = 120
    max_tokens: int = 128
    ks: tuple[int, ...] = (1, 3, 5)
    batches: tuple[int, ...] = (1, 4, 16)


@dataclass
class Measured:
    folder: Path
    wall_seconds: float
    summary: dict[str, Any]

    @property
    def al(self) -> float | None:
        return self.summary.get("mean_acceptance_length")

    @property
    def rate(self) -> float:
        return self.summary["output_tokens"] / self.summary["generation_seconds"]

    def mean_step_ms(self) -> float | None:
        """The run's engine steps, timed: total seconds over total steps, every set-up and occupancy bucket."""
        totals = bucket_totals(self.summary.get("step_buckets"))
        return 1000 * totals["seconds"] / totals["steps"] if totals["steps"] else None


def large_head() -> Path:
    """The embedded head, built unless it is there."""
    large = default_heads_dir() / SMOLLM2_EAGLE3.name
    ensure_embedded_head(large)
    return large


def small_head(bench: Path) -> Path:
    """A head trained as the embedded one on the first half of its sequences (the same export)."""
    small = bench / "head-small"
    if not small.exists():
        data = read_exports([work_dir(SMOLLM2_EAGLE3) / "export"])
        settings = dataclasses.replace(SMOLLM2_EAGLE3.settings, max_sequences=_sequences(data.shards) // 2)
        train_head(data, small, settings)
    return small


def _sequences(shards: list[Path]) -> int:
    from datasets import load_from_disk

    return sum(len(load_from_disk(str(shard))) for shard in shards)


def run(name: str, overrides: list[str], bench: Path) -> Measured:
    """One job as a fresh process under ``bench/name``; a finished one is read back."""
    root = bench / name
    done = root / DONE_FILE
    if done.is_file():
        record = json.loads(done.read_text())
        return Measured(Path(record["folder"]), record["wall_seconds"], record["summary"])
    if root.exists():
        shutil.rmtree(root)  # stopped part way: its wall time would be only the rest's
    folder, shard, wall = run_generate(overrides, root)
    summary = shard.read_summary().to_dict()
    done.write_text(json.dumps({"folder": str(folder), "wall_seconds": wall, "summary": summary}) + "\n")
    return Measured(folder, wall, summary)


def tokens(folder: Path) -> dict[tuple[str, int, int], list[int]]:
    rows = [r for shard in shard_folders(folder) for part in shard.parts() for r in pq.read_table(part).to_pylist()]
    return {(r["row_id"], r["turn"], r["sample_index"]): list(r["completion_token_ids"]) for r in rows}


def equal_share(run_folder: Path, baseline: dict[tuple[str, int, int], list[int]]) -> str:
    mine = tokens(run_folder)
    same = sum(mine.get(key) == value for key, value in baseline.items())
    return f"{same}/{len(baseline)}"


def _eagle3(head: Path, k: int) -> list[str]:
    return ["spec=eagle3", f"spec.model={head}", f"spec.num_speculative_tokens={k}"]


def drafter_report(plan: DrafterPlan, root: Path, stamp: str) -> tuple[str, Path]:
    bench = root / f"drafter-{stamp}"
    bench.mkdir(parents=True, exist_ok=True)
    rows = [f"max_samples={plan.rows}", f"sampling.max_tokens={plan.max_tokens}"]
    large = large_head()
    # The goal's figure first, then every run of the larger head, before the smaller one trains (about 40 minutes):
    # a bench stopped while it trains has them all, and --stamp reads them back.
    first = run("chat-large-k3", [*WORKLOADS["chat"], *COMMON, *rows, *_eagle3(large, 3)], bench)
    log.info("the larger head on held-out chat at k 3: AL %.3f (goal %s)", first.al or 0, GOAL_AL)
    for workload, data in WORKLOADS.items():
        run(f"{workload}-none", [*data, *COMMON, *rows, "spec=none"], bench)
        for k in plan.ks:
            run(f"{workload}-large-k{k}", [*data, *COMMON, *rows, *_eagle3(large, k)], bench)
    speed = _speed_lines(
        plan, bench, large, [f"max_samples={plan.speed_rows}", f"sampling.max_tokens={plan.max_tokens}"]
    )
    lossless = [f"max_samples={plan.lossless_rows}", f"sampling.max_tokens={plan.max_tokens}"]
    lossless_line = _lossless_line(plan, bench, large, lossless)
    made = {"large": large, "small": small_head(bench)}
    lines = ["# (l) A trained EAGLE-3 head for the embedded model", "", machine_header(), ""]
    lines += _training_lines(made)
    # Acceptance and token equality, each workload at the engine's default batch.
    lines += ["", "## Acceptance on held-out prompts (float32 greedy, default batch)", ""]
    lines += [
        "| workload | head | k | AL | acceptance per position | tokens equal to spec=none |",
        "|---|---|---|---|---|---|",
    ]
    chat_al: dict[str, float] = {}
    for workload, data in WORKLOADS.items():
        none = run(f"{workload}-none", [*data, *COMMON, *rows, "spec=none"], bench)
        baseline = tokens(none.folder)
        for size, head in made.items():
            for k in plan.ks:
                measured = run(f"{workload}-{size}-k{k}", [*data, *COMMON, *rows, *_eagle3(head, k)], bench)
                per = measured.summary.get("acceptance_rate_per_position") or []
                lines.append(
                    f"| {workload} | {size} | {k} | {measured.al:.3f} | {', '.join(f'{p:.2f}' for p in per)} | "
                    f"{equal_share(measured.folder, baseline)} |"
                )
                if workload == "chat" and k == 3:
                    chat_al[size] = float(measured.al or 0)
    lines += ["", _goal_line(chat_al)]
    lines += ["", "## tok/s on chat (float32 greedy, one run each, set-ups alternating)", "", *speed]
    lines += ["", "## Lossless at temperature 0.7 (larger head, k 3; target-scored)", "", lossless_line]
    report = "\n".join(lines) + "\n"
    path = bench / "report.md"
    path.write_text(report)
    return report, path


def _training_lines(made: dict[str, Path]) -> list[str]:
    lines = [
        "| head | sequences | tokens trained | steps | seconds | first loss | last loss |",
        "|---|---|---|---|---|---|---|",
    ]
    for size, head in made.items():
        record = json.loads((head / TRAINED_RECORD).read_text())
        settings = record["settings"]
        lines.append(
            f"| {size} | {settings.get('max_sequences') or 'all'} | {record['tokens']} | {record['steps']} | "
            f"{record['seconds']} | {record['first_loss']:.3f} | {record['last_loss']:.3f} |"
        )
    return lines


def _goal_line(chat_al: dict[str, float]) -> str:
    large, small = chat_al.get("large", 0.0), chat_al.get("small", 0.0)
    met = large >= GOAL_AL and large > small
    return f"goal (chat, k 3): larger head AL {large:.3f} >= {GOAL_AL} and above the smaller's {small:.3f}: " + (
        "met" if met else "NOT met"
    )


def _speed_lines(plan: DrafterPlan, bench: Path, head: Path, rows: list[str]) -> list[str]:
    setups = {
        "none": ["spec=none"],
        "ngram-k3": ["spec=ngram", "spec.num_speculative_tokens=3"],
        "eagle3-k3": _eagle3(head, 3),
    }
    lines = [
        "| batch | set-up | tok/s | x none | AL | mean step ms | where the step goes |",
        "|---|---|---|---|---|---|---|",
    ]
    for batch in plan.batches:
        order = list(setups) if batch % 2 else list(reversed(setups))
        measured = {
            name: run(
                f"speed-b{batch}-{name}",
                [*WORKLOADS["chat"], *COMMON, *rows, *setups[name], f"engine.max_num_seqs={batch}"],
                bench,
            )
            for name in order
        }
        for name in setups:
            m = measured[name]
            where = ""
            if name == "eagle3-k3" and m.rate <= measured["none"].rate:
                where = _where(m, measured["ngram-k3"], measured["none"])
            al = f"{m.al:.2f}" if m.al else "-"
            step = m.mean_step_ms()
            lines.append(
                f"| {batch} | {name} | {m.rate:.1f} | {m.rate / measured['none'].rate:.2f} | {al} | "
                f"{'-' if step is None else f'{step:.1f}'} | {where} |"
            )
    return lines


def _where(head: Measured, ngram: Measured, none: Measured) -> str:
    h, g, n = head.mean_step_ms(), ngram.mean_step_ms(), none.mean_step_ms()
    if h is None or g is None or n is None:
        return "no step timing"
    return (
        f"step {h / n:.2f}x none's: verifying 4 tokens a sequence about {g:.1f} ms (n-gram k3's step), the head's "
        f"3 draft passes about {h - g:.1f} ms ({(h - g) / 3:.1f} ms each)"
    )


def _lossless_line(plan: DrafterPlan, bench: Path, head: Path, rows: list[str]) -> str:
    from specbatch.analysis.lossless.run_check import check_run

    sampled = [*WORKLOADS["chat"], "model.dtype=float32", "tracking=off", "engine.warmup=false", "sampling=sampled"]
    measured = run(f"lossless-large-k3-{plan.lossless_rows}rows", [*sampled, *rows, *_eagle3(head, 3)], bench)
    result = check_run(measured.folder)
    return f"verdict: **{result['verdict']}** ({result['why']}); AL {measured.al:.3f}"
