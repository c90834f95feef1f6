"""(h) Sampling with n samples per prompt (issue 29; ``--sampling`` runs only this).

Timing: spec=none, ngram and suffix on the default data set (humaneval_edit, ``rows`` prompts), temperature 0.7
with n=4 samples per prompt (each a request of its own), at full batch and the default dtype, through ``run_job``;
tok/s and speedup from compare's analysis of the stored runs.

The distribution check: each method against spec=none on the same prompts in float32 at temperature 0.7, with
``check_samples`` samples of the first tokens (analysis/distribution.py reads the first 8) for ``check_prompts``
prompts asking to repeat a sentence (SENTENCES): ngram and suffix on the embedded model, draft_model on the tiny
random pair (model=tiny_llama). One engine per set-up, one after another.
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
# The check's prompts: short (each of its thousands of requests prefills its prompt on a CPU) and answered by
# copying, so drafts are proposed and accepted within the first tokens the check reads.
SENTENCES = (
    "The cat sat on the warm mat by the kitchen door.",
    "Seven small boats sailed across the quiet blue lake.",
    "My brother plays the old piano every Sunday evening.",
    "A bright red kite flew high above the green hills.",
    "We planted tomatoes and beans in the garden last spring.",
    "The train to the city leaves at half past eight.",
    "Please close the window before the rain comes in.",
    "Her grandmother baked fresh bread with honey and oats.",
    "The library opens at nine and closes at six.",
    "Two owls watched the forest from a tall pine tree.",
    "He wrote a long letter to his friend in Spain.",
    "The children built a sandcastle near the big rocks.",
)


def write_copy_prompts(path: Path) -> list[str]:
    """The check's data set as a local JSONL file at ``path``; the overrides that read it."""
    rows = [{"id": f"s{i}", "text": f"Repeat this sentence exactly: {s}"} for i, s in enumerate(SENTENCES)]
    atomic_write_text(path, "".join(json.dumps(row) + "\n" for row in rows))
    return ["dataset=local", f"dataset.path={path}", "dataset.template='{text}'", "dataset.id_column=id"]


# Per model: its overrides and the methods checked against its spec=none.
CHECKED = {"smollm2_135m": ("ngram", "suffix"), "tiny_llama": ("draft_model",)}


def _runs(common: list[str], methods: tuple[str, ...], root: Path, name: str) -> list[Path]:
    """spec=none, then each method, with ``common``; their run folders."""
    return [
        run_job(compose_job([*common, f"spec={m}", f"output_root={root}", f"run_name={name}"])).folder.root
        for m in ("none", *methods)
    ]


def sampling_report(
    rows: int, n: int, check_prompts: int, check_samples: int, root: Path, stamp: str
) -> tuple[str, Path]:
    """The timing of n-sample runs with and without speculation, then the distribution check's table; the report
    and where it was written."""
    timed_common = [f"max_samples={rows}", "sampling=sampled", f"sampling.n={n}", "tracking.experiment=bench"]
    timed = _runs(timed_common, TIMED[1:], root, f"timed-{stamp}")
    timing = run_compare(Sources(timed), out_dir=root / f"sampling-timed-{stamp}").comparison
    lines = [f"# jobs/bench.py --sampling, {time.strftime('%Y-%m-%d %H:%M')}", machine_header(), ""]
    lines += [f"## (h) {rows} prompts x n={n} samples, temperature 0.7, full batch", "", format_comparison(timing), ""]
    data = write_copy_prompts(root / f"copy-prompts-{stamp}.jsonl")
    for model, methods in CHECKED.items():
        common = [
            f"model={model}",
            *data,
            "model.dtype=float32",
            "sampling=sampled",
            f"sampling.n={check_samples}",
            f"sampling.max_tokens={max(PREFIX_LENGTHS)}",
            f"max_samples={check_prompts}",
            "tracking.experiment=bench",
        ]
        folders = _runs(common, methods, root, f"checked-{stamp}")
        checked = run_compare(Sources(folders), out_dir=root / f"sampling-{model}-{stamp}").comparison
        lines += [f"## the distribution check, model={model}", *distribution_table(checked), ""]
    path = root / f"sampling-{stamp}.md"
    atomic_write_text(path, "\n".join(lines) + "\n")
    return "\n".join(lines), path
