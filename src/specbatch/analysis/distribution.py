"""Under sampling, is a speculative run's output distribution its baseline's? A two-sample test on the first tokens.

Lossless speculation under sampling means rejection sampling hands back the target's own distribution; token
equality says nothing there (two samples of one distribution differ). So compare tests whether the completions of a
speculative run and of its ``spec=none`` baseline, on the same prompts with n samples each, could come from one
distribution:

- per prompt (turn 1: a later turn's prompt holds each sample's own earlier answer, so its samples do not share a
  prompt) and per prefix length m in ``PREFIX_LENGTHS``, the first m tokens of each sample are one category (a
  completion shorter than m is its own category); a 2 × categories table of the two runs' counts gets the chi-square
  test of homogeneity with its p-value from ``RESAMPLES`` random permutations of the samples between the runs (the
  exact conditional test, estimated, as scipy.stats.chi2_contingency's PermutationMethod does, from a fixed seed so
  a rerun gives the same p): valid where the tables are sparse, as they are at these n, where the chi-square
  distribution is not;
- over prompts, one stratified test: the prompts' chi-square statistics are summed, and the sum's null distribution
  is drawn by permuting every prompt's samples on its own (the prompts' samples are independent). An engine that is
  not lossless shifts most prompts a little; the sum sees that where a min-p rule (Bonferroni) needs one prompt to
  show it alone, and it has the power the closed form below states, where Fisher's method over the prompts'
  p-values had markedly less (0.5 instead of 0.8 at the same shift, in tests/analysis/test_distribution.py's
  simulation);
- over the prefix lengths, Bonferroni (the lengths test the same samples, so they are not independent): the run's
  p-value is ``len(PREFIX_LENGTHS)`` × the smallest.

m = 1 is a check of the set-up rather than of speculation: the first token always comes from the prefill, before
anything is drafted, so it differs only when the two runs do not sample the same model in the same way. The tokens
after it are where drafts are accepted or rejected.

The verdict: ``differs`` when p < ``ALPHA``; otherwise ``consistent`` when the test could have seen a shift of
``MAX_DETECTABLE_TV`` in total variation (power ``POWER`` at level ``ALPHA``), else ``too few samples to tell``. The
detectable shift has two parts:
- a closed-form approximation for the mass the samples cover: every prompt's distribution moves δ of its mass
  between two outcomes of probability 1/2 (the hardest case for a given δ), whose chi-square statistic over P
  prompts is non-central with P degrees of freedom and non-centrality P·δ²/(¼·(1/n_run + 1/n_base));
- plus the mass the samples do not cover: a prefix seen once is a category no test can compare, so a shift inside
  the outcomes no sample repeats goes unseen. Its size is estimated as Good and Turing do, by the share of the pooled
  samples whose prefix occurs once (averaged over prompts). A model that spreads its first tokens thin (a random one:
  every sample its own prefix) is "too few samples to tell", never "consistent".
The figure reported is for the best-covered prefix that drafts can touch (m ≥ 2: the first token is the prefill's).

Both runs must draw independent samples: the job's seeds depend on the run's set-up (specbatch.config.sample_seed),
so a run and its baseline should never share one. The check tests that rather than trusting it: a run's sample whose
seed is one of the baseline's for the same prompt (e.g. a spec=auto run made before auto drew seeds of its own:
its spec=none rows repeat the baseline's samples) is left out and counted (``shared_seeds``); when nothing is left,
the verdict is ``NOT_INDEPENDENT``, never "consistent".
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from specbatch.analysis.run_data import RunData

RowKey = tuple[str, int, int]

# The prefixes tested: the first token (from the prefill: a check of the set-up), and the first 2, 4 and 8, where
# drafts are accepted or rejected (k drafts and the bonus token span k + 1 tokens: two steps of k=3 within 8).
PREFIX_LENGTHS = (1, 2, 4, 8)
# Level of the test, and the power at which the detectable shift is stated.
ALPHA = 0.01
POWER = 0.8
# A run whose test could not see a shift of this total variation is "too few samples to tell".
MAX_DETECTABLE_TV = 0.15
# Permutations per table (the smallest p-value one table can give is 1 / (RESAMPLES + 1)), from a fixed seed.
RESAMPLES = 9999
SEED = 0

CONSISTENT, DIFFERS, TOO_FEW = "consistent", "differs", "too few samples to tell"
NOT_INDEPENDENT = "not independent samples (they share the baseline's seeds)"

TEST_NAME = (
    f"chi-square of the first {', '.join(map(str, PREFIX_LENGTHS))} tokens per prompt (permutation p, "
    f"{RESAMPLES} resamples) summed over prompts, Bonferroni over prefix lengths"
)


@dataclass(frozen=True)
class DistributionTest:
    """The test on two runs' samples: its p-values, what it could detect, and the verdict."""

    # Prompts with at least two samples in both runs, and the median samples per prompt of each run.
    prompts: int
    samples: float
    baseline_samples: float
    # Per prefix length ("1", "2", ...): the p of the statistic summed over prompts.
    p_values: dict[str, float]
    # Bonferroni over prefix lengths; None when no prompt could be tested.
    p_value: float | None
    # The total-variation shift the test detects with probability POWER at level ALPHA (approximation above).
    detectable_tv: float | None
    verdict: str
    test: str = TEST_NAME
    # Per prefix length: the share of the pooled samples whose prefix occurs once (the mass the test cannot see).
    unseen_mass: dict[str, float] = field(default_factory=dict)
    # First-turn samples of the run left out because their seed is one of the baseline's for the same prompt.
    shared_seeds: int = 0


@dataclass(frozen=True)
class DistributionCheck:
    """One sampled run against its baseline (compare's row of the check)."""

    run_folder: str
    baseline_folder: str
    method: str
    k: int | None
    batch_size: int
    temperature: float
    result: DistributionTest


def samples_per_prompt(tokens: dict[RowKey, list[int]]) -> dict[str, list[list[int]]]:
    """Each first turn's samples (completion token ids), by row id."""
    out: dict[str, list[list[int]]] = defaultdict(list)
    for (row_id, turn, _), ids in sorted(tokens.items()):
        if turn == 1:
            out[row_id].append(list(ids))
    return dict(out)


def table_p_value(run: Sequence[tuple[int, ...]], base: Sequence[tuple[int, ...]]) -> float:
    """The permutation p-value of the chi-square test of homogeneity of two samples of categories (one prompt)."""
    observed, resampled = table_statistics(run, base, np.random.default_rng(SEED))
    return _p_value(observed, resampled)


def table_statistics(
    run: Sequence[tuple[int, ...]], base: Sequence[tuple[int, ...]], rng: np.random.Generator
) -> tuple[float, np.ndarray]:
    """Pearson's chi-square statistic of the two samples' table, and ``RESAMPLES`` draws of it under the null.

    The test scipy.stats.chi2_contingency runs with a PermutationMethod: under the null hypothesis the run's counts
    are a draw of its sample size, without replacement, from the pooled samples. They are drawn here as whole tables
    (numpy's multivariate hypergeometric), which is the same distribution as shuffling the samples and hundreds of
    times faster: a comparison tests every prompt at every prefix length (tests/analysis/test_distribution.py holds
    the two to each other)."""
    categories = sorted(set(run) | set(base))
    if len(categories) < 2:
        return 0.0, np.zeros(RESAMPLES)  # one category in both: nothing can differ
    index = {c: i for i, c in enumerate(categories)}
    table = np.zeros((2, len(categories)), dtype=np.int64)
    for row, sample in enumerate((run, base)):
        np.add.at(table[row], [index[c] for c in sample], 1)
    pooled, sizes = table.sum(axis=0), table.sum(axis=1)
    # "count" draws sample by sample: with a few hundred samples and many categories, the fastest.
    draws = rng.multivariate_hypergeometric(pooled, int(sizes[0]), size=RESAMPLES, method="count")
    return float(_chi_square(table[0], pooled, sizes)), _chi_square(draws, pooled, sizes)


def _p_value(observed: float, resampled: np.ndarray) -> float:
    # A permutation p-value counts the observed table among the permutations: never 0.
    return float((1 + np.count_nonzero(resampled >= observed * (1 - 1e-12))) / (RESAMPLES + 1))


def _chi_square(first_row: np.ndarray, pooled: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Pearson's statistic of 2 × C tables given by their first row (the second is the pooled counts minus it)."""
    share = sizes / sizes.sum()
    expected = np.stack([pooled * share[0], pooled * share[1]])
    observed = np.stack([first_row, pooled - first_row], axis=-2)
    return ((observed - expected) ** 2 / expected).sum(axis=(-2, -1))


def detectable_tv(prompts: int, n_run: float, n_base: float, alpha: float = ALPHA, power: float = POWER) -> float:
    """The shift δ (total variation) that P prompts with these samples per prompt detect with probability ``power``
    at level ``alpha``: non-central chi-square, P degrees of freedom, non-centrality P·δ²/(¼·(1/n_run + 1/n_base))
    (the module docstring says why). 1.0 when even a shift of all the mass would not reach that power."""
    if prompts < 1 or min(n_run, n_base) < 1:
        return 1.0
    # Imported here: scipy.stats takes ~0.7 s to import, and every job imports this module (spec=auto's decision
    # reads the check) while only a comparison computes a power.
    from scipy import optimize, stats

    critical = stats.chi2.ppf(1 - alpha, prompts)

    def shortfall(delta: float) -> float:
        noncentrality = prompts * delta**2 / (0.25 * (1 / n_run + 1 / n_base))
        return float(stats.ncx2.sf(critical, prompts, noncentrality)) - power

    if shortfall(1.0) < 0:
        return 1.0
    return float(optimize.brentq(shortfall, 1e-9, 1.0, xtol=1e-6))


def shared_seeds(run_seeds: dict[RowKey, int | None], baseline_seeds: dict[RowKey, int | None]) -> set[RowKey]:
    """The run's first-turn samples whose seed is one of the baseline's first-turn samples' for the same row (a
    null seed is the engine's own random state: shared with nothing)."""
    theirs: dict[str, set[int]] = defaultdict(set)
    for (row_id, turn, _), seed in baseline_seeds.items():
        if turn == 1 and seed is not None:
            theirs[row_id].add(seed)
    return {key for key, seed in run_seeds.items() if key[1] == 1 and seed is not None and seed in theirs[key[0]]}


def check_distribution(
    run: dict[RowKey, list[int]],
    baseline: dict[RowKey, list[int]],
    run_seeds: dict[RowKey, int | None] | None = None,
    baseline_seeds: dict[RowKey, int | None] | None = None,
) -> DistributionTest:
    """The test of the module docstring on two runs' token ids, keyed by (row id, turn, sample); with the seeds of
    both runs' samples, the run's samples that share one with the baseline are left out (module docstring)."""
    shared = shared_seeds(run_seeds or {}, baseline_seeds or {}) & run.keys()
    mine = samples_per_prompt({key: ids for key, ids in run.items() if key not in shared})
    theirs = samples_per_prompt(baseline)
    rows = sorted(r for r in mine.keys() & theirs.keys() if len(mine[r]) >= 2 and len(theirs[r]) >= 2)
    if not rows:
        verdict = NOT_INDEPENDENT if shared else TOO_FEW
        return DistributionTest(0, 0.0, 0.0, {}, None, None, verdict, shared_seeds=len(shared))
    n_run = statistics.median(len(mine[r]) for r in rows)
    n_base = statistics.median(len(theirs[r]) for r in rows)
    p_values: dict[str, float] = {}
    unseen: dict[str, float] = {}
    for m in PREFIX_LENGTHS:
        tables = [([tuple(s[:m]) for s in mine[r]], [tuple(s[:m]) for s in theirs[r]]) for r in rows]
        # One generator per prefix length: each prompt's draws are its own, and the same runs give the same p.
        rng = np.random.default_rng(SEED)
        per_prompt = [table_statistics(run_sample, base_sample, rng) for run_sample, base_sample in tables]
        # Stratified: the prompts' statistics summed, each prompt permuted on its own (its draws added up draw by
        # draw, the prompts being independent).
        observed = sum(o for o, _ in per_prompt)
        p_values[str(m)] = _p_value(observed, np.sum([draws for _, draws in per_prompt], axis=0))
        unseen[str(m)] = statistics.fmean(_singleton_share([*a, *b]) for a, b in tables)
    p_value = min(1.0, len(PREFIX_LENGTHS) * min(p_values.values()))
    # At Bonferroni's level per prefix length, which is what each length is tested at.
    covered = detectable_tv(len(rows), n_run, n_base, ALPHA / len(PREFIX_LENGTHS))
    drafted = [unseen[str(m)] for m in PREFIX_LENGTHS if m >= 2] or list(unseen.values())
    detectable = min(1.0, covered + min(drafted))
    if p_value < ALPHA:
        verdict = DIFFERS
    elif detectable > MAX_DETECTABLE_TV:
        verdict = TOO_FEW
    else:
        verdict = CONSISTENT
    return DistributionTest(
        len(rows),
        float(n_run),
        float(n_base),
        p_values,
        p_value,
        detectable,
        verdict,
        unseen_mass=unseen,
        shared_seeds=len(shared),
    )


def _singleton_share(sample: list[tuple[int, ...]]) -> float:
    """Good-Turing's estimate of the probability of the outcomes not seen twice: the share of outcomes seen once."""
    counts = Counter(sample)
    return sum(1 for c in counts.values() if c == 1) / len(sample)


def distribution_checks(members: list[RunData], base: list[RunData] | None) -> list[DistributionCheck]:
    """Each sampled speculative run's samples against its baseline's first repeat (greedy runs: none; they have
    token equality)."""
    temperature = float(members[0].config["sampling"]["temperature"])
    if not base or members[0].method == "none" or temperature == 0:
        return []
    return [
        DistributionCheck(
            run_folder=str(m.root),
            baseline_folder=str(base[0].root),
            method=m.method,
            k=m.k,
            batch_size=m.batch_size,
            temperature=temperature,
            result=check_distribution(m.tokens, base[0].tokens, m.seeds, base[0].seeds),
        )
        for m in members
    ]


def shared_seeds_note(check: DistributionCheck) -> str:
    """What compare says of a run whose samples share seeds with its baseline's (left out of its check)."""
    test = check.result
    left = "nothing was left to test" if test.verdict == NOT_INDEPENDENT else "the rest were tested"
    return (
        f"{check.run_folder}: {test.shared_seeds} of its first-turn samples were drawn with the seed of a sample of "
        f"its baseline ({check.baseline_folder}) for the same prompt, so they are not independent samples of the "
        f"distribution (a spec=auto run made before auto drew seeds of its own repeats the baseline's in its "
        f"spec=none rows): they are left out of the distribution check, and {left}"
    )
