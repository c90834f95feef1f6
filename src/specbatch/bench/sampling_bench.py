"""(h) Sampling with n samples per prompt (issue 29; ``--sampling`` runs only this).

Timing: spec=none, ngram and suffix on the default data set (humaneval_edit, ``rows`` prompts), temperature 0.7
with n=4 samples per prompt (each a request of its own), at full batch and the default dtype, through ``run_job``;
tok/s and speedup from compare's analysis of the stored runs.

The distribution check: each method against spec=none on the same prompts in float32 at temperature 0.7, with
``check_samples`` samples of the first tokens (analysis/distribution.py reads the first 8) for ``check_prompts``
prompts asking to copy a sentence (SENTENCES): ngram, suffix and draft_model (the model drafting for itself) on the
embedded model, draft_model on the tiny random pair (CHECKED says why each). One engine per set-up, one after
another.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from specbatch.analysis.distribution import PREFIX_LENGTHS
from specbatch.analysis.report import Sources, run_compare
from specbatch.analysis.tables import distribution_table, format_comparison
from specbatch.bench import machine_header
from specbatch.common.atomic_files import atomic_write_text
from specbatch.config import compose_job
from specbatch.pipeline import run_job

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


# Per model: what the check adds to the sampling, and the set-ups checked against its spec=none.
# - The embedded model: n-gram, suffix, and draft_model with the model drafting for itself (its proposals greedy, as
#   vLLM's default, and sampled from the draft's probabilities, spec.draft_sample_method=probabilistic: the path where
#   the rejection sampler must be handed those probabilities, vLLM issue #40149's case). A draft that is the target
#   accepts most drafts, so the rejection sampler's every branch is exercised on a real distribution.
# - The tiny random pair (model=tiny_llama's own draft): its random weights spread every position over the
#   vocabulary (at 128 samples each first token is its own category: no test can compare them), so the check keeps
#   the 4 likeliest tokens there (sampling.top_k=4). Its draft and target share no likely token, so it rejects
#   nearly every draft: the check then says the residual sampling is right, not the acceptance.
SELF_DRAFT = ("spec=draft_model", "spec.model=${model.path}")
CHECKED: dict[str, tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]] = {
    "smollm2_135m": (
        (),
        (("spec=ngram",), ("spec=suffix",), SELF_DRAFT, (*SELF_DRAFT, "spec.draft_sample_method=probabilistic")),
    ),
    "tiny_llama": (("sampling.top_k=4",), (("spec=draft_model",),)),
}


def _runs(common: list[str], setups: tuple[tuple[str, ...], ...], root: Path, name: str) -> list[Path]:
    """spec=none, then each set-up, with ``common``; their run folders."""
    return [
        run_job(compose_job([*common, *setup, f"output_root={root}", f"run_name={name}"])).folder.root
        for setup in (("spec=none",), *setups)
    ]


def sampling_report(
    rows: int, n: int, check_prompts: int, check_samples: int, root: Path, stamp: str
) -> tuple[str, Path]:
    """The timing of n-sample runs with and without speculation, then the distribution check's table; the report
    and where it was written."""
    timed_common = [f"max_samples={rows}", "sampling=sampled", f"sampling.n={n}", "tracking.experiment=bench"]
    timed = _runs(timed_common, tuple((f"spec={m}",) for m in TIMED[1:]), root, f"timed-{stamp}")
    timing = run_compare(Sources(timed), out_dir=root / f"sampling-timed-{stamp}").comparison
    lines = [f"# jobs/bench.py --sampling, {time.strftime('%Y-%m-%d %H:%M')}", machine_header(), ""]
    lines += [f"## (h) {rows} prompts x n={n} samples, temperature 0.7, full batch", "", format_comparison(timing), ""]
    data = write_copy_prompts(root / f"copy-prompts-{stamp}.jsonl")
    for model, (extra, setups) in CHECKED.items():
        common = [
            f"model={model}",
            *data,
            "model.dtype=float32",
            "sampling=sampled",
            f"sampling.n={check_samples}",
            f"sampling.max_tokens={max(PREFIX_LENGTHS)}",
            f"max_samples={check_prompts}",
            "tracking.experiment=bench",
            *extra,
        ]
        folders = _runs(common, setups, root, f"checked-{stamp}")
        checked = run_compare(Sources(folders), out_dir=root / f"sampling-{model}-{stamp}").comparison
        lines += [f"## the distribution check, model={model} {' '.join(extra)}".rstrip(), *distribution_table(checked)]
        # The table names a run by its method; two draft_model set-ups differ in their overrides.
        named = {str(folder): " ".join(setup) for folder, setup in zip(folders[1:], setups, strict=True)}
        lines += [
            "",
            *(f"- {named.get(c.run_folder, c.method)}: {c.result.verdict}" for c in checked.distribution),
            "",
        ]
    path = root / f"sampling-{stamp}.md"
    atomic_write_text(path, "\n".join(lines) + "\n")
    return "\n".join(lines), path
