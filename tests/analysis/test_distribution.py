"""The distribution check under sampling (analysis/distribution.py): the test itself on made-up samples, and through
the job and compare with the dummy engine, where an engine that accepts drafts greedily while the baseline samples
must be flagged, and a lossless one must not be."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient
from scipy import stats

from specbatch.analysis import distribution
from specbatch.analysis.distribution import (
    CONSISTENT,
    DIFFERS,
    MAX_DETECTABLE_TV,
    NOT_INDEPENDENT,
    PREFIX_LENGTHS,
    TOO_FEW,
    check_distribution,
    detectable_tv,
    table_p_value,
)
from specbatch.analysis.report import find_runs, run_compare
from specbatch.analysis.tables import format_comparison
from specbatch.backends.dummy.dummy import DummyEngine
from specbatch.engine import engine_fingerprint
from specbatch.pipeline import run_job
from specbatch.tracking.comparison import folder_run_ids


def samples(rng: np.random.Generator, prompts: int, n: int, shift: float = 0.0) -> dict:
    """Completions of one token per sample, per prompt: token 0 or 1 with chance 1/2 each, ``shift`` of the mass
    moved from 0 to 1 (a shift of that much total variation)."""
    return {
        (f"p{p}", 1, s): [int(rng.random() < 0.5 + shift)] for p in range(prompts) for s in range(n)
    }  # fmt: skip


def test_the_table_test_is_scipys_permutation_chi_square() -> None:
    rng = np.random.default_rng(1)
    for p_run, p_base in (([0.4, 0.3, 0.2, 0.1], [0.3, 0.3, 0.2, 0.2]), ([0.5, 0.5, 0, 0], [0.2, 0.3, 0.3, 0.2])):
        run = [(int(x),) for x in rng.choice(4, size=40, p=p_run)]
        base = [(int(x),) for x in rng.choice(4, size=50, p=p_base)]
        categories = sorted(set(run) | set(base))
        table = np.array([[run.count(c) for c in categories], [base.count(c) for c in categories]])
        method = stats.PermutationMethod(n_resamples=9999, rng=np.random.default_rng(0))
        reference = stats.chi2_contingency(table, correction=False, method=method).pvalue
        assert table_p_value(run, base) == pytest.approx(reference, abs=0.02)
    assert table_p_value([(1,)] * 5, [(1,)] * 7) == 1.0


def test_verdicts_same_shifted_and_too_few() -> None:
    rng = np.random.default_rng(0)
    same = check_distribution(samples(rng, 16, 200), samples(rng, 16, 200))
    assert same.verdict == CONSISTENT and same.p_value > 0.01 and same.detectable_tv <= MAX_DETECTABLE_TV
    assert same.prompts == 16 and same.samples == same.baseline_samples == 200
    assert list(same.p_values) == [str(m) for m in PREFIX_LENGTHS]
    shifted = check_distribution(samples(rng, 16, 200, shift=0.2), samples(rng, 16, 200))
    assert shifted.verdict == DIFFERS and shifted.p_value < 0.001
    few = check_distribution(samples(rng, 4, 8), samples(rng, 4, 8))
    assert few.verdict == TOO_FEW and few.detectable_tv > MAX_DETECTABLE_TV
    # Every sample its own first token (a model that spreads them thin): no test can compare those.
    thin = {(f"p{p}", 1, s): [1000 * p + s] for p in range(16) for s in range(30)}
    spread = check_distribution(thin, {(r, t, s): [ids[0] + 10**6] for (r, t, s), ids in thin.items()})
    assert spread.verdict == TOO_FEW and spread.detectable_tv == 1.0 and spread.unseen_mass["2"] == 1.0
    # One sample per prompt (sampling.n=1) cannot be tested per prompt at all.
    assert check_distribution(samples(rng, 4, 1), samples(rng, 4, 1)).verdict == TOO_FEW


def test_samples_sharing_the_baselines_seeds_are_left_out_and_counted() -> None:
    """A run's sample drawn with the seed of the baseline's sample of its prompt is not an independent sample of
    the distribution: left out; when nothing is left, the verdict says so instead of "consistent"."""
    rng = np.random.default_rng(0)
    run, base = samples(rng, 8, 20), samples(rng, 8, 20)
    base_seeds = {key: 1000 * int(key[0][1:]) + key[2] for key in base}
    # Half the run's samples (sample index < 10) repeat the baseline's seeds; one has none (the engine's own state).
    run_seeds = {key: base_seeds[key] if key[2] < 10 else base_seeds[key] + 500 for key in run}
    run_seeds[("p0", 1, 0)] = None
    partly = check_distribution(run, base, run_seeds, base_seeds)
    assert partly.shared_seeds == 8 * 10 - 1 and partly.samples == 10 and partly.p_value is not None
    shared = check_distribution(run, base, base_seeds, base_seeds)
    assert shared.shared_seeds == 8 * 20 and shared.verdict == NOT_INDEPENDENT and shared.p_value is None
    assert check_distribution(run, base, {}, base_seeds).shared_seeds == 0


def test_the_detectable_shift_is_what_the_test_detects_four_times_in_five(monkeypatch: pytest.MonkeyPatch) -> None:
    # 999 permutations per table instead of 9,999 (the smallest p, times four prefix lengths, 0.004, is still below
    # the level): the 60 checks take a tenth of the time, on the slowest machines 26 s.
    monkeypatch.setattr(distribution, "RESAMPLES", 999)
    prompts, n = 8, 64
    delta = detectable_tv(prompts, n, n, 0.01 / len(PREFIX_LENGTHS))
    assert detectable_tv(prompts, 4 * n, 4 * n) < delta < detectable_tv(prompts // 2, n, n)
    rng = np.random.default_rng(7)
    found = [
        check_distribution(samples(rng, prompts, n, shift=delta), samples(rng, prompts, n)).verdict == DIFFERS
        for _ in range(60)
    ]
    # Power 0.8 by the approximation; 60 simulated checks put the truth within about ±0.12 of what they show.
    assert 0.6 <= sum(found) / len(found) <= 0.98


class GreedyDrafts(DummyEngine):
    """Not lossless under sampling: a drafted token the step accepts is the most likely token (as if drafts were
    accepted greedily), while the step's last token, and every token without speculation, is sampled."""

    def _token(self, run, drafted: bool) -> int:
        return self._greedy_token(run) if drafted else super()._token(run, drafted)


PROMPTS, SAMPLES = 24, 128


def test_compare_flags_an_engine_that_is_not_lossless_and_passes_one_that_is(
    local_job_factory, tmp_path: Path
) -> None:
    common = [
        "sampling=sampled",
        f"sampling.n={SAMPLES}",
        "sampling.max_tokens=8",
        "engine.max_num_seqs=256",
        f"chunk_size={PROMPTS}",
        f"max_samples={PROMPTS}",
    ]
    none, ngram = (local_job_factory(*common, rows=PROMPTS, spec=method) for method in ("none", "ngram"))
    broken = local_job_factory(*common, "run_name=greedy-drafts", rows=PROMPTS, spec="ngram")
    folders = {}
    setups = (("none", none, DummyEngine), ("ngram", ngram, DummyEngine), ("broken", broken, GreedyDrafts))
    for name, job, engine_class in setups:
        engine = engine_class(engine_fingerprint(job), k=job.spec.k, concurrency=256)
        done = run_job(job, engine=engine)
        folders[name] = done.folder.root
        assert (done.summary.prompts, done.summary.rows) == (PROMPTS, PROMPTS * SAMPLES)

    result = run_compare(find_runs(list(folders.values())), tmp_path / "comparison")
    checks = {Path(c.run_folder).resolve(): c.result for c in result.comparison.distribution}
    assert set(checks) == {folders["ngram"].resolve(), folders["broken"].resolve()}
    lossless, greedy = checks[folders["ngram"].resolve()], checks[folders["broken"].resolve()]
    assert (lossless.prompts, lossless.samples, lossless.baseline_samples) == (PROMPTS, SAMPLES, SAMPLES)
    assert lossless.verdict == CONSISTENT, lossless
    assert greedy.verdict == DIFFERS and greedy.p_value < 0.001, greedy
    table = format_comparison(result.comparison)
    assert "distribution under sampling" in table and "| differs |" in table and "| consistent |" in table
    saved = json.loads((tmp_path / "comparison" / "comparison.json").read_text())
    assert {d["result"]["verdict"] for d in saved["distribution"]} == {CONSISTENT, DIFFERS}

    # Logged onto each compared run's own MLflow run, as the greedy equality is.
    runs = folder_run_ids([folders["ngram"], folders["broken"]])
    client = MlflowClient(runs[folders["broken"]].uri)
    logged = client.get_run(runs[folders["broken"]].run_ids[0]).data
    assert logged.tags["against_none.distribution"] == DIFFERS
    assert logged.metrics["against_none/distribution_p_value"] < 0.001
    assert 0 < logged.metrics["against_none/detectable_tv"] <= MAX_DETECTABLE_TV
    assert client.get_run(runs[folders["ngram"]].run_ids[0]).data.tags["against_none.distribution"] == CONSISTENT
