"""What every job pays for before it does any work. A job's start (imports, config, tokenizer) is paid again by every
sweep job, Slurm task, engine process and README dry run; two imports that cost ~1.7 s of CPU of it were nothing a
job needs: scipy.stats (only a comparison computes a power) and scikit-learn (transformers imports sklearn.metrics
with every tokenizer whenever it is installed; mlflow asks for it, jobs/uv-cpu-overrides.txt drops it on CPU)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import GENERATE, PROJECT_ROOT


def test_a_job_imports_neither_scipy_stats_nor_sklearn_nor_what_only_auto_and_comparisons_need(
    tmp_path: Path,
) -> None:
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"id": "r0", "q": "What is 2 + 2?"}) + "\n")
    args = ["engine.backend=dummy", "dataset=local", f"dataset.path={data}", "dataset.template='{q}'"]
    args += ["tracking=off", f"output_root={tmp_path / 'out'}"]
    # The dummy backend: the whole job (config, data, the tokenizer's chat template, rows written) without vLLM,
    # which imports scipy itself. Python lists every module it imports (-X importtime), on stderr.
    result = subprocess.run(
        [sys.executable, "-X", "importtime", str(GENERATE), *args],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith("import time:")]
    imported = {line.rsplit("|", 1)[1].strip() for line in lines}
    assert "transformers" in imported, "the job loaded no tokenizer: this test no longer sees what it is about"
    assert "specbatch.run.executor" in imported, "the job ran no shard: this test no longer sees what it is about"
    # The default spec=ngram: a job of one set-up needs neither spec=auto's decision nor the analysis and replay
    # prediction it reads (issue 51: jobs/generate.py imported 72 of the package's 128 modules).
    needless = sorted(
        m for m in imported if m.split(".")[:2] in (["specbatch", p] for p in ("auto", "analysis", "prediction"))
    )
    assert not needless, f"a spec=ngram job imports {needless}: import them where spec=auto or a comparison needs them"
    assert "scipy.stats" not in imported, "a job's start imports scipy.stats again: import it where it is used"
    assert not {m for m in imported if m.split(".")[0] == "sklearn"}, (
        "scikit-learn is installed, and transformers imports it with every tokenizer: jobs/setup.sh drops it on CPU"
    )
