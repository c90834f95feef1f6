"""(h) Sampling with n samples per prompt (issue 29; ``--sampling`` runs only this).

Timing: spec=none, ngram and suffix on the default data set (humaneval_edit, ``rows`` prompts), temperature 0.7
with n=4 samples per prompt (each a request of its own), at full batch and the default dtype, through ``run_job``;
tok/s and speedup from compare's analysis of the stored runs.

The lossless check (issue 53): each set-up of CHECKED generates at most CHECK_TOKENS sampled tokens in float32 and
the referee (specbatch.analysis.lossless) scores every one of them against the target's own distribution: tokens,
referee seconds, p-value and the temperature error it would have caught. The planted faults run the engine with a
sampler other than the one the check is told was asked (temperature x 1.05, top-p 0.9 for 0.95): they must come out
`differs`. One engine per set-up, one after another.

The prompts of the two-sample prefix check (analysis/distribution.py, tests/analysis/test_distribution_cpu.py) stay
here: SENTENCES, write_copy_prompts.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from specbatch.analysis.lossless.run_check import check_run, result_path
from specbatch.analysis.lossless.sampler import Sampler
from specbatch.analysis.report import Sources, run_compare
from specbatch.analysis.tables import format_comparison
from specbatch.bench import machine_header
from specbatch.common.atomic_files import atomic_write_text
from specbatch.config import compose_job
from specbatch.pipeline import run_job
from specbatch.run.status_merge import finished_summary

TIMED = ("none", "ngram", "suffix")
# The check's prompts: each asks to copy a sentence, so n-gram and suffix drafts are proposed and accepted within the
# first tokens the check reads. Picked from 70 candidates by the embedded model's exact distribution of the first two
# tokens (float32, temperature 0.7, top-p 0.95, computed with transformers): where it is spread (the likeliest
# two-token start holds 0.50-0.90 of the mass: "The weary" / "The tired", "The giraffe" / "The tall", ...), the drafted
# second token is accepted or rejected and a sampler that is not lossless shows; and where it is concentrated on a
# few starts (pooled 256 samples are expected to see at most 3 % of their mass only once; "Seven small boats ..."
# spreads 25 %), the test covers that mass (analysis/distribution.py: the unseen mass adds to the shift it can
# detect). With these 8 prompts x 128 samples, the check sees a shift of about 0.12: "consistent" is within reach.
SENTENCES = (
    "The tired traveler rested under a shady tree.",
    "The tall giraffe ate leaves from the top of the tree.",
    "The orange cat slept on the sunny windowsill.",
    "The busy bees flew from flower to flower all day.",
    "The heavy snow covered the roofs of the quiet town.",
    "The green frog sat on a lily pad in the pond.",
    "The black horse galloped across the open meadow.",
    "The old clock in the hall struck twelve.",
)
# Before each sentence: the prompts are then 130-134 tokens with the chat template, more than vLLM's CPU KV block of
# 128, so a prompt's first block is computed once and its samples share it (prefix caching: 96 % of prompt tokens
# hit). Each sample then costs its last few prompt tokens and its own: 1,024 samples of 8 tokens took 72 s with
# spec=none on 2 cores, where the 47-token prompts before prefilled every sample whole (1,152 in 3.6 minutes).
PREAMBLE = (
    "Here is a short exercise in careful copying. You will be shown one sentence below, taken from a simple story "
    "written for young readers. Read it carefully, then write it out again exactly as it is given, with the same "
    "words in the same order and the same punctuation. Keep every capital letter as it is. Do not add a title, a "
    "greeting, an explanation or any other words of your own before or after it.\n\nSentence: "
)


def write_copy_prompts(path: Path) -> list[str]:
    """The check's data set as a local JSONL file at ``path``; the overrides that read it."""
    rows = [{"id": f"c{i}", "text": PREAMBLE + s} for i, s in enumerate(SENTENCES)]
    atomic_write_text(path, "".join(json.dumps(row) + "\n" for row in rows))
    return ["dataset=local", f"dataset.path={path}", "dataset.template='{text}'", "dataset.id_column=id"]


# The budget: at most this many sampled tokens per checked set-up (rows x max_tokens, whatever stops early).
CHECK_TOKENS = 20_000
CHECK_MAX_TOKENS = 128
# The general chat data set (160 rows whose answers copy little: every token says something about the temperature);
# 156 rows x 128 tokens stays within CHECK_TOKENS.
CHECK_DATA = ("dataset=chat", f"max_samples={CHECK_TOKENS // CHECK_MAX_TOKENS}")
ASKED = Sampler(0.7, 0, 0.95)
SELF_DRAFT = ("spec=draft_model", "spec.model=${model.path}")
SMOLLM2, TINY = "model=smollm2_135m", "model=tiny_llama"


@dataclass(frozen=True)
class Checked:
    """One checked set-up: its overrides (on top of sampling=sampled, float32, CHECK_DATA), and for a planted fault
    the sampler the check is told was asked while the engine ran the overrides' own."""

    name: str
    overrides: tuple[str, ...]
    planted: Sampler | None = None


# The set-ups first, so that a bench stopped early has them: the tiny random pair's draft_model and EAGLE (no
# trained drafter for the embedded model exists offline: the pair's random draft and head propose, and the target's
# random weights spread each position over thousands of tokens, whose tempered logits still move with a temperature
# error: 20,000 tokens catch 2 %, measured with transformers), then the embedded model on chat: n-gram at top-k 20,
# n-gram, suffix, spec=none (the referee on the engine's sampler with nothing drafted: a control), the model drafting
# for itself, and last the planted faults, on n-gram (the cheapest speculative engine to run; the evidence's tests
# plant each fault, the greedy rule too, without an engine). The referee's cost is per token over the whole 49k
# vocabulary whatever the model, more where the distribution is flat: on 2 cores a set-up's generation and check
# take 10-30 minutes (docs/sampling.md).
CHECKED = (
    Checked("tiny pair: spec=draft_model (k=3)", (TINY, "spec=draft_model")),
    Checked("tiny pair: spec=eagle (k=3)", (TINY, "spec=eagle")),
    Checked("spec=ngram (k=3), top-k 20", (SMOLLM2, "spec=ngram", "sampling.top_k=20", "sampling.top_p=1.0")),
    Checked("spec=ngram (k=3)", (SMOLLM2, "spec=ngram")),
    Checked("spec=suffix (k=5)", (SMOLLM2, "spec=suffix")),
    Checked("spec=none", (SMOLLM2, "spec=none")),
    # The tiny pair's random draft is accepted almost never (AL 1.0001): there the check sees rejected positions
    # resampled. The model drafting for itself is accepted most of the time, on a real distribution, with its
    # proposals greedy (vLLM's default) and sampled from the draft's probabilities (vLLM issue #40149's path).
    Checked("spec=draft_model, the model drafting for itself", (SMOLLM2, *SELF_DRAFT)),
    Checked(
        "the same, draft_sample_method=probabilistic", (SMOLLM2, *SELF_DRAFT, "spec.draft_sample_method=probabilistic")
    ),
    Checked("planted: temperature x 1.05", (SMOLLM2, "spec=ngram", "sampling.temperature=0.735"), ASKED),
    Checked("planted: top-p 0.9 for 0.95", (SMOLLM2, "spec=ngram", "sampling.top_p=0.9"), ASKED),
)


def checked_overrides(setup: Checked, root: Path, name: str) -> list[str]:
    """The job of one checked set-up."""
    common = ["sampling=sampled", "model.dtype=float32", f"sampling.max_tokens={CHECK_MAX_TOKENS}", *CHECK_DATA]
    return [*common, "tracking.experiment=bench", *setup.overrides, f"output_root={root}", f"run_name={name}"]


def lossless_table(root: Path, stamp: str, shown: Callable[[list[str]], None]) -> list[str]:
    """Each CHECKED set-up generated, then checked by the referee: one Markdown row each, handed to ``shown`` as each
    comes (the report so far is kept if the bench is stopped). With an earlier invocation's stamp, a finished run is
    found and its check, when it was made against the same sampler, read back."""
    lines = [
        "| set-up | engine ran (T / top-k / top-p) | checked as | AL | samples | tokens | referee s | p | smallest "
        "| detectable T error | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for setup in CHECKED:
        job = compose_job(checked_overrides(setup, root, f"lossless-{stamp}"))
        folder = run_job(job).folder.root
        asked = setup.planted or Sampler.of(job.sampling)
        done = result_path(folder)
        record: dict[str, Any] = json.loads(done.read_text()) if done.exists() else {}
        if record.get("sampler") != asdict(asked):
            record = check_run(folder, asked)
        figures, referee, ran = record["figures"], record["referee"], job.sampling
        summary = finished_summary(folder)
        smallest = figures.get("smallest") or {}
        al, p, error = (
            summary.mean_acceptance_length,
            figures.get("p_value"),
            figures.get("detectable_temperature_error"),
        )
        checked = record["sampler"]
        lines.append(
            f"| {setup.name} | {ran.temperature:g} / {ran.top_k} / {ran.top_p:g} | "
            f"{checked['temperature']:g} / {checked['top_k']} / {checked['top_p']:g} | "
            f"{'-' if al is None else f'{al:.2f}'} | {referee['samples']} | {figures['tokens']} | "
            f"{referee['seconds']:.0f} | {'-' if p is None else f'{p:.2g}'} | "
            f"{smallest.get('statistic', '-')} {smallest.get('group', '')} | "
            f"{'-' if error is None else f'{error:.0%}'} | {record['verdict']} |"
        )
        shown(lines)
    return lines


def sampling_report(rows: int, n: int, root: Path, stamp: str) -> tuple[str, Path]:
    """The timing of n-sample runs with and without speculation, then the lossless check's table; the report and
    where it was written."""
    timed_common = [f"max_samples={rows}", "sampling=sampled", f"sampling.n={n}", "tracking.experiment=bench"]
    timed = [
        run_job(compose_job([*timed_common, f"spec={m}", f"output_root={root}", f"run_name=timed-{stamp}"]))
        for m in TIMED
    ]
    timing = run_compare(Sources([t.folder.root for t in timed]), out_dir=root / f"sampling-timed-{stamp}").comparison
    lines = [f"# jobs/bench.py --sampling, {time.strftime('%Y-%m-%d %H:%M')}", machine_header(), ""]
    lines += [f"## (h) {rows} prompts x n={n} samples, temperature 0.7, full batch", "", format_comparison(timing), ""]
    lines += [
        f"## the lossless check: dataset=chat, at most {CHECK_TOKENS} tokens per set-up, float32, referee in "
        "float32 (transformers)",
        "",
    ]
    path = root / f"sampling-{stamp}.md"

    def shown(table: list[str]) -> None:
        atomic_write_text(path, "\n".join(lines + table) + "\n")

    lines += lossless_table(root, stamp, shown)
    shown([])
    return "\n".join(lines), path
