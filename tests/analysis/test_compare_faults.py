"""Compare on a sweep with a failed job and on a run whose summary is damaged: real jobs/generate.py and
jobs/compare.py processes on the dummy backend (no model)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import PROJECT_ROOT, run_generate

COMPARE = PROJECT_ROOT / "jobs" / "compare.py"


def test_a_failed_sweep_job_is_named_and_not_repeated_and_a_damaged_run_is_skipped(tmp_path: Path) -> None:
    data, out = tmp_path / "a.jsonl", tmp_path / "out"
    data.write_text("".join(json.dumps({"id": f"r{i}", "q": f"question {i}"}) + "\n" for i in range(2)))
    missing = tmp_path / "missing.jsonl"
    common = ["engine.backend=dummy", "max_samples=2", "tracking=off", f"output_root={out}", "dataset=local"]
    common.append("dataset.template='{q}'")
    # Jobs 0 and 1 run none and ngram on the data; job 2's data file does not exist (and the sweep stops there).
    sweep = run_generate(["-m", *common, f"dataset.path={data},{missing}", "spec=none,ngram"], timeout=300)
    assert sweep.returncode == 2, sweep.stderr[-2000:]
    [sweep_dir] = [p.parent for p in out.rglob("sweep.json")]

    compared = subprocess.run([sys.executable, str(COMPARE), str(sweep_dir)], capture_output=True, text=True)
    text = compared.stdout + compared.stderr
    assert compared.returncode == 0, text[-3000:]
    assert "sweep job 2 (" in text and f"failed: ConfigError: dataset.path={missing} matches no file" in text
    repeat = [line for line in text.splitlines() if "to measure every set-up" in line]
    assert repeat and str(missing) not in repeat[0], "the suggested command sweeps the failing value again"

    # A finished run whose shard summary was cut short: compare names it and compares the rest.
    other = run_generate([*common, "spec=ngram", "spec.num_speculative_tokens=2", f"dataset.path={data}"])
    assert other.returncode == 0, other.stderr[-2000:]
    [stats] = [p for p in (out / "runs").rglob("stats/shard-*.json") if "ngram-k2" in str(p)]
    stats.write_text("{")
    compared = subprocess.run(
        [sys.executable, str(COMPARE), str(sweep_dir), str(stats.parents[1])], capture_output=True, text=True
    )
    text = compared.stdout + compared.stderr
    assert compared.returncode == 0, text[-3000:]
    assert f"not compared: {stats.parents[1]}: 1 of 1 shards are not done" in text
    assert "stats/shard-00000-of-00001.json is damaged (JSONDecodeError)" in text and "JSONDecodeError:" not in text
