"""The referee's verdict in compare: a checked sampled run shows its recorded verdict in the table and comparison.json,
an unchecked one says how to check it, a record that no longer covers the run's rows (or cannot be read) is called
stale, and greedy runs are left out (token equality is their check).

The dummy engine's tokens are digests, not draws from the embedded model the referee loads: the real referee must
find them impossible, which is also the check failing on a sampler that is not the target's."""

from __future__ import annotations

import json
from pathlib import Path

from specbatch.analysis.lossless.run_check import check_run, result_path
from specbatch.analysis.lossless.verdicts import NOT_CHECKED, STALE
from specbatch.analysis.report import find_runs, run_compare
from specbatch.analysis.tables import format_comparison
from specbatch.backends.dummy.dummy import DummyEngine
from specbatch.engine import engine_fingerprint
from specbatch.pipeline import run_job

PROMPTS, SAMPLES = 4, 3


def _runs(local_job_factory, *extra: str) -> dict[str, Path]:
    common = ["sampling.max_tokens=8", f"max_samples={PROMPTS}", "tracking.enabled=false", *extra]
    folders = {}
    for method in ("none", "ngram"):
        job = local_job_factory(*common, rows=PROMPTS, spec=method)
        folders[method] = run_job(job, engine=DummyEngine(engine_fingerprint(job), k=job.spec.k)).folder.root
    return folders


def test_compare_shows_the_referees_verdict_and_says_what_is_unchecked_or_stale(
    local_job_factory, tmp_path: Path
) -> None:
    folders = _runs(local_job_factory, "sampling=sampled", f"sampling.n={SAMPLES}")
    record = check_run(folders["ngram"])
    assert record["verdict"] == "differs" and record["figures"]["impossible_tokens"] > 0, record["why"]

    result = run_compare(find_runs(list(folders.values())), tmp_path / "comparison", log_to_mlflow=False)
    rows = {Path(r.run_folder).name: r for r in result.comparison.lossless}
    checked, unchecked = rows[folders["ngram"].name], rows[folders["none"].name]
    assert (checked.verdict, checked.tokens) == ("differs", record["figures"]["tokens"])
    assert (checked.temperature, checked.top_p) == (0.7, 0.95) and checked.referee_seconds is not None
    assert unchecked.verdict == NOT_CHECKED and f"jobs/check_lossless.py {folders['none']}" in unchecked.why
    table = format_comparison(result.comparison)
    assert "lossless under sampling" in table and "| differs |" in table and "| not checked |" in table
    saved = json.loads((tmp_path / "comparison" / "comparison.json").read_text())
    assert {r["verdict"] for r in saved["lossless"]} == {"differs", NOT_CHECKED}

    # The record no longer covers the run's tokens (as after a resume that added rows): stale, with the command.
    path = result_path(folders["ngram"])
    edited = json.loads(path.read_text())
    edited["referee"]["tokens"] += 5
    path.write_text(json.dumps(edited))
    again = run_compare(find_runs([folders["ngram"], folders["none"]]), tmp_path / "again", log_to_mlflow=False)
    (stale,) = [r for r in again.comparison.lossless if r.run_folder == str(folders["ngram"])]
    assert stale.verdict == STALE and "check again" in stale.why and stale.tokens is None
    path.write_bytes(b"\x00{not json")
    broken = run_compare(find_runs([folders["ngram"], folders["none"]]), tmp_path / "broken", log_to_mlflow=False)
    (unreadable,) = [r for r in broken.comparison.lossless if r.run_folder == str(folders["ngram"])]
    assert unreadable.verdict == STALE and "unreadable" in unreadable.why


def test_greedy_runs_have_no_lossless_rows(local_job_factory, tmp_path: Path) -> None:
    folders = _runs(local_job_factory)
    result = run_compare(find_runs(list(folders.values())), tmp_path / "comparison", log_to_mlflow=False)
    assert result.comparison.lossless == [] and "lossless under sampling" not in format_comparison(result.comparison)
