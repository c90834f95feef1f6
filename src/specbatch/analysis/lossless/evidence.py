"""Is every sampled token a draw from the target's own processed distribution? Evidence pooled token by token.

Under lossless speculation each sampled token x_t is a draw from p_t, the target's next-token distribution given the
prompt and the sample's earlier tokens, after the run's temperature, top-k and top-p (specbatch.analysis.lossless.
sampler). The referee scores every token of every sample with the target (teacher-forced), and this module pools:

- the **randomised PIT**: with the vocabulary ordered by descending p_t, u_t = P_t(tokens before x_t) + V p_t(x_t),
  V uniform on [0, 1]. Exactly uniform on [0, 1] when x_t ~ p_t, whatever p_t is; a sampler too greedy piles u near
  0, one too flat near 1. Tested for uniformity by a **chi-square on deciles** (9 degrees of freedom). Why deciles
  and not Kolmogorov-Smirnov or Anderson-Darling: the decile counts are a sufficient summary for the shifts that
  matter (mass moved between the head and the tail), and their power against any alternative has a closed form,
  the non-central chi-square, computed from the run's own p_t below; KS and AD would need simulation for that;
- the **log score**: sum over tokens of log p_t(x_t) + H(p_t), whose mean is 0 under the null (the expected
  log-probability of a draw is minus the entropy), divided by its standard deviation under the null (the sum of the
  per-token variances of log p_t), two-sided normal;
- a token with p_t(x_t) = 0 (outside what the sampler keeps) is proof on its own: the sampler could not have drawn it.

Both statistics are tested on every token, on the first token of each completion (drawn in the prefill, before
anything is drafted: a check of the set-up) and on the later ones (where drafts are accepted or rejected), with
Bonferroni over the tests made. The rows do not say which token was a drafted one, so no split by acceptance.

**Power**, from the run's own distributions: for each alternative sampler (the temperature off by a factor in
TEMPERATURE_FACTORS), every token adds what x ~ q_t (q_t: p_t redone at the wrong temperature) would give: the
decile probabilities of u_t, the mean and variance of its log score, and q_t's mass outside p_t's support. Summed,
those give each test's power at the run's size exactly (the non-central chi-square; the normal for the score), so the
verdict can say which temperature error the run would have caught with power POWER, and how many more tokens it
needs when that is above MAX_TEMPERATURE_ERROR.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from scipy import stats

from specbatch.analysis.lossless.sampler import Sampler

ALPHA = 0.001
POWER = 0.8
BINS = 10
# The temperature errors the power is reckoned for, both ways (T x (1 - d) and T x (1 + d)).
TEMPERATURE_ERRORS = (0.01, 0.02, 0.03, 0.05, 0.1, 0.2)
TEMPERATURE_FACTORS = tuple(sorted({1 + s * d for d in TEMPERATURE_ERRORS for s in (-1, 1)}))
# "consistent" needs the run to catch a temperature off by this much (the bar).
MAX_TEMPERATURE_ERROR = 0.03
GROUPS = ("all", "first", "later")
# A sampled token the referee's top-p drops while the mass ahead of it is within this of top-p is at the edge, where
# the referee's logits and the engine's may round either way: not counted as proof of a fault.
EDGE_TOLERANCE = 1e-3
# Fewer tokens than this in a group and it is not tested (a chi-square on 10 bins wants 5 expected per bin).
MIN_TOKENS = 50


@dataclass
class _Group:
    """One group's pooled null statistics."""

    tokens: int = 0
    bins: list[int] = field(default_factory=lambda: [0] * BINS)
    score: float = 0.0
    variance: float = 0.0

    def p_values(self) -> dict[str, float]:
        expected = self.tokens / BINS
        chi2 = sum((c - expected) ** 2 / expected for c in self.bins)
        z = self.score / math.sqrt(self.variance) if self.variance > 0 else 0.0
        return {"pit": float(stats.chi2.sf(chi2, BINS - 1)), "log_score": float(2 * stats.norm.sf(abs(z)))}


@dataclass
class _Alternative:
    """What tokens drawn from a mis-tempered sampler would give, summed over the run's positions."""

    bins: list[float] = field(default_factory=lambda: [0.0] * BINS)
    mean: float = 0.0
    variance: float = 0.0
    # Sum of log(1 - q's mass outside p's support): the chance that no token falls outside is its exp.
    inside: float = 0.0

    def add(
        self, q: torch.Tensor, p: torch.Tensor, lp: torch.Tensor, before: torch.Tensor, entropy: torch.Tensor
    ) -> None:
        """Positions whose null distribution is ``p`` (sorted descending, ``lp`` its logs, 0 outside its support;
        ``before``: the mass ahead of each token) and the alternative's ``q`` in the same order."""
        support = p > 0
        inside = torch.where(support, q, torch.zeros_like(q)).sum(-1).clamp(min=1e-300)
        mean_lp = (q * lp).sum(-1) / inside
        self.mean += float((mean_lp + entropy).sum())
        self.variance += float(((q * lp * lp).sum(-1) / inside - mean_lp**2).sum())
        self.inside += float(torch.log(inside.clamp(max=1.0)).sum())
        # P(u <= edge) for x ~ q inside p's support: the q of the tokens whose PIT interval ends below the edge, and
        # the straddling token's share of its interval below it. The intervals are in order (p sorted descending),
        # so one search per edge finds the straddling token: no pass over the row per edge.
        kept = torch.where(support, q, torch.zeros_like(q))
        below = torch.cumsum(kept, dim=-1)
        edges = torch.arange(1, BINS, dtype=torch.float64).div(BINS).expand(len(p), BINS - 1).contiguous()
        ends = (before + p).contiguous()
        full = torch.searchsorted(ends, edges, right=True).clamp(max=p.shape[-1] - 1)
        whole = torch.where(full > 0, below.gather(-1, (full - 1).clamp(min=0)), torch.zeros_like(edges))
        width = p.gather(-1, full)
        share = torch.where(width > 0, (edges - before.gather(-1, full)) / width.clamp(min=1e-300), 0.0).clamp(0, 1)
        cdf = torch.cat([(whole + kept.gather(-1, full) * share) / inside.unsqueeze(-1), torch.ones(len(p), 1)], -1)
        steps = torch.diff(cdf, dim=-1, prepend=torch.zeros(len(p), 1, dtype=torch.float64))
        for j, mass in enumerate(steps.sum(0).tolist()):
            self.bins[j] += mass


@dataclass(frozen=True)
class Verdict:
    verdict: str
    why: str
    figures: dict[str, Any]


class Evidence:
    """Pooled evidence over a run's sampled tokens: ``add`` each sample's scored positions, then ``verdict``."""

    def __init__(self, sampler: Sampler, seed: int = 0) -> None:
        self.sampler = sampler
        self.groups = {name: _Group() for name in GROUPS}
        self.alternatives = {f: _Alternative() for f in TEMPERATURE_FACTORS}
        self.impossible: list[dict[str, Any]] = []
        self.at_edge: list[dict[str, Any]] = []
        # Positions the alternatives were reckoned over (every scored one).
        self.positions = 0
        # The V of the randomised PIT, from a fixed seed: a rerun gives the same p-values.
        self._random = torch.Generator().manual_seed(seed)

    def add(self, logits: torch.Tensor, tokens: list[int], first: int = 0, where: str = "") -> None:
        """The target's raw logits at each scored position (rows) and the token sampled there; ``first``: the
        completion position of the first row (0: the row is the completion's first token). Everything is computed
        on each row's logits sorted once (a temperature does not change their order), cut to the tokens the widest
        alternative sampler keeps."""
        if not tokens:
            return
        rows = torch.arange(len(tokens))
        x = torch.tensor(tokens, dtype=torch.long)
        ordered, order = logits.sort(dim=-1, descending=True)
        rank = (order == x.unsqueeze(-1)).to(torch.int8).argmax(dim=-1)
        widest = self.sampler.at_temperature(max(TEMPERATURE_FACTORS)).sorted_probs(ordered)
        cut = max(int((widest > 0).sum(dim=-1).max()), int(rank.max()) + 1)
        p = self.sampler.sorted_probs(ordered, cut)
        px = p[rows, rank]
        outside = torch.nonzero(px == 0).flatten().tolist()
        if outside:
            # Before top-p, the mass ahead of each token: one just past the top-p edge is the referee's logits against
            # the engine's (both float32, not the same kernels), not proof; it is counted apart and left out.
            plain = replace(self.sampler, top_p=1.0).sorted_probs(ordered, cut)
            ahead = torch.cumsum(plain, dim=-1) - plain
            for i in outside:
                r = int(rank[i])
                edge = plain[i, r] > 0 and float(ahead[i, r]) < self.sampler.top_p + EDGE_TOLERANCE
                (self.at_edge if edge else self.impossible).append(
                    {"where": where, "position": first + i, "token": tokens[i]}
                )
        before = torch.cumsum(p, dim=-1) - p
        u = before[rows, rank] + torch.rand(len(tokens), generator=self._random, dtype=torch.float64) * px
        support = p > 0
        lp = torch.where(support, p.log(), torch.zeros_like(p))
        entropy = -(p * lp).sum(-1)
        score = torch.where(px > 0, lp[rows, rank] + entropy, torch.zeros_like(px))
        variance = (p * lp * lp).sum(-1) - entropy**2
        bins = torch.clamp((u * BINS).long(), 0, BINS - 1).tolist()
        for i, b in enumerate(bins):
            if px[i] == 0:
                continue
            for name in ("all", "first" if first + i == 0 else "later"):
                group = self.groups[name]
                group.tokens += 1
                group.bins[b] += 1
                group.score += float(score[i])
                group.variance += float(variance[i])
        self.positions += len(tokens)
        for factor, alternative in self.alternatives.items():
            q = self.sampler.at_temperature(factor).sorted_probs(ordered, cut)
            alternative.add(q, p, lp, before, entropy)

    def tests(self) -> dict[str, dict[str, float]]:
        """The p-value of each statistic in each group with enough tokens."""
        return {name: g.p_values() for name, g in self.groups.items() if g.tokens >= MIN_TOKENS}

    def power(self, factor: float, scale: float = 1.0) -> float:
        """The chance the run's tests (at its Bonferroni level) catch a sampler at ``factor`` x the temperature,
        with ``scale`` x the run's tokens (the same mix)."""
        n_tests = max(2 * len(self.tests()), 2)
        level = ALPHA / n_tests
        total = self.groups["all"]
        alternative = self.alternatives[factor]
        n = total.tokens * scale
        if n <= 0 or total.variance <= 0:
            return 0.0
        shares = [b / self.positions for b in alternative.bins]
        noncentrality = n * sum((s - 1 / BINS) ** 2 / (1 / BINS) for s in shares)
        pit = float(stats.ncx2.sf(stats.chi2.isf(level, BINS - 1), BINS - 1, noncentrality))
        sd0 = math.sqrt(total.variance * scale)
        mean = alternative.mean * scale / sd0
        sd = math.sqrt(max(alternative.variance, 0.0) * scale) / sd0
        cut = stats.norm.isf(level / 2)
        score = float(stats.norm.sf((cut - mean) / sd) + stats.norm.cdf((-cut - mean) / sd)) if sd > 0 else 0.0
        outside = 1 - math.exp(alternative.inside * scale)
        return 1 - (1 - outside) * (1 - max(pit, score))

    def detectable(self, scale: float = 1.0) -> float | None:
        """The smallest temperature error (both ways) caught with power POWER; None: not even the largest."""
        for error in TEMPERATURE_ERRORS:
            if all(self.power(1 + s * error, scale) >= POWER for s in (-1, 1)):
                return error
        return None

    def verdict(self) -> Verdict:
        tests = self.tests()
        n_tests = 2 * len(tests)
        figures: dict[str, Any] = {
            "tokens": self.groups["all"].tokens,
            "pit_deciles": list(self.groups["all"].bins),
            "tests": tests,
            "impossible_tokens": len(self.impossible),
            "top_p_edge_tokens": len(self.at_edge),
        }
        if self.impossible:
            first = self.impossible[0]
            return Verdict(
                "differs",
                f"{len(self.impossible)} sampled token(s) had probability 0 under the target's processed distribution "
                f"(first: token {first['token']} at position {first['position']} of {first['where'] or 'a sample'}):"
                " the sampler could not have drawn them",
                figures,
            )
        if not tests:
            return Verdict("too few tokens", f"fewer than {MIN_TOKENS} scored tokens", figures)
        name, statistic, p = min(((g, s, v) for g, t in tests.items() for s, v in t.items()), key=lambda i: i[2])
        adjusted = min(1.0, p * n_tests)
        figures.update({"p_value": adjusted, "smallest": {"group": name, "statistic": statistic, "p": p}})
        detectable = self.detectable()
        figures["detectable_temperature_error"] = detectable
        if adjusted < ALPHA:
            where = {"all": "over every token", "first": "on the first tokens", "later": "after the first token"}
            return Verdict(
                "differs", f"the {statistic.replace('_', ' ')} {where[name]}: p = {adjusted:.2g} (Bonferroni)", figures
            )
        if detectable is not None and detectable <= MAX_TEMPERATURE_ERROR:
            return Verdict(
                "consistent",
                f"p = {adjusted:.2g} over {figures['tokens']} tokens; a sampling temperature off by "
                f"{detectable:.0%} or more would have been found with power {POWER}",
                figures,
            )
        more = self._tokens_needed()
        figures["tokens_needed"] = more
        return Verdict(
            "too few tokens",
            f"p = {adjusted:.2g}, but {figures['tokens']} tokens would catch only a temperature off by "
            f"{f'more than {TEMPERATURE_ERRORS[-1]:.0%}' if detectable is None else f'{detectable:.0%}'}; "
            f"{'more than a million' if more is None else f'about {more}'} tokens of the same kind would catch "
            f"{MAX_TEMPERATURE_ERROR:.0%}",
            figures,
        )

    def _tokens_needed(self) -> int | None:
        """Tokens (of the run's mix) for power POWER at MAX_TEMPERATURE_ERROR, by doubling then bisection."""

        def enough(scale: float) -> bool:
            found = self.detectable(scale)
            return found is not None and found <= MAX_TEMPERATURE_ERROR

        low, high = 1.0, 2.0
        while not enough(high):
            low, high = high, high * 2
            if high > 1e6:
                return None
        for _ in range(20):
            middle = (low + high) / 2
            low, high = (low, middle) if enough(middle) else (middle, high)
        return math.ceil(high * self.groups["all"].tokens)
