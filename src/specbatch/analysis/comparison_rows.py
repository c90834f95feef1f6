"""The rows compare builds: one per set-up against its baseline, one per compared run folder, and the baseline
against itself. Below compare, recommend and schedule, which all read them, so none of them imports another back."""

from __future__ import annotations

from dataclasses import dataclass, field

from specbatch.analysis.distribution import DistributionTest
from specbatch.config import DEFAULT_BACKEND, spec_caption


@dataclass
class CompareRow:
    """One set-up (method and k at one batch size), over its repeats, against its baseline."""

    model: str
    dataset: str
    dtype: str
    workload: str
    batch_size: int
    method: str
    k: int | None
    repeats: int
    output_tokens_per_second: float
    output_tokens_per_second_std: float
    output_tokens_per_second_min: float
    output_tokens_per_second_max: float
    # Mean tok/s over the baseline's mean tok/s; min/max pair each repeat with the baseline mean.
    speedup: float | None
    speedup_min: float | None
    speedup_max: float | None
    mean_acceptance_length: float | None
    draft_acceptance_rate: float | None
    acceptance_rate_per_position: list[float] | None
    # Against the baseline's first repeat (for the baseline itself: its other repeats against the first).
    rows_compared: int
    identical_rows: int
    identical_share: float | None
    first_differences: list[str]
    run_folders: list[str] = field(default_factory=list)
    # What the recommendation reads (analysis/recommend.py): each repeat's tok/s over the baseline's MEDIAN tok/s,
    # summed up as their median and their spread (1.4826 × MAD); the baseline's own row has median 1.0.
    output_tokens_per_second_median: float | None = None
    speedup_median: float | None = None
    speedup_spread: float | None = None
    # A k per batch size (spec.k_schedule; k is then its largest k): a set-up of its own, apart from fixed k's.
    k_schedule: list[list[int]] | None = None
    # engine.backend, and the workload without engine and weights (same prompts, model and sampling).
    engine: str = DEFAULT_BACKEND
    prompts_key: str = ""
    # Output tokens per target forward pass, output / (output - accepted): every engine has it, also one that does
    # not report its drafting steps (llama.cpp, which has no AL). 1.0 without speculation.
    tokens_per_pass: float | None = None
    # The machine(s) its repeats ran on (specbatch.common.machine lines, "; "-joined); "" when not recorded.
    machine: str = ""
    # spec=auto: the set-up(s) its decision chose, e.g. "ngram k=5" (None for a fixed set-up).
    chose: str | None = None
    # How it verifies or drafts other than vLLM's defaults, e.g. "block verification" (methods.variant_caption): a
    # set-up of its own, shown beside the defaults' row, which the recommendation picks among.
    variant: str | None = None

    @property
    def caption(self) -> str:
        """The set-up as tables and plots name it: ``ngram k=3``, ``ngram k=3 (block verification)``, or for
        spec=auto ``auto → ngram k=5``."""
        caption = spec_caption(self.method, self.k, self.k_schedule)
        if self.variant:
            caption += f" ({self.variant})"
        return f"{caption} → {self.chose}" if self.chose else caption


@dataclass(frozen=True)
class RunFigures:
    """One compared run folder against its baseline: what compare logs onto the run's own MLflow run, under the
    same names on every run, so MLflow's chart view draws one bar per run."""

    run_folder: str
    # Its tok/s over the baseline's median tok/s (the per-repeat speedup the recommendation reads).
    speedup: float
    # Share of rows identical to the baseline's first repeat (None for that repeat itself).
    identical_share: float | None
    # The baseline's first repeat (the reference of identical_share).
    baseline_folder: str
    # Under sampling: its samples tested against the baseline's (None for greedy runs and the baseline).
    distribution: DistributionTest | None = None


@dataclass(frozen=True)
class BaselineConsistency:
    """The baseline against itself at two batch sizes: differences here come from numerics, not speculation."""

    model: str
    dataset: str
    dtype: str
    batch_sizes: tuple[int, int]
    rows_compared: int
    identical_rows: int
    identical_share: float | None
