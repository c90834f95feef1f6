"""(i) spec=simulate against the real method it simulates (issue 54; ``--simulate`` runs only this).

n-gram k=3 runs for real on the default data set (humaneval_edit, ``rows`` prompts, full batch); spec=simulate then
runs the target alone at that run's own profile (its marginal rates and the share of steps that drafted). Both run
with ``sampling.ignore_eos=true``, so every row is ``sampling.max_tokens`` long in both: the simulated text has no
natural end, and tok/s compares set-ups only at the same lengths. The two alternate, ``repeats`` times each, one
engine per run; the figures are the medians. Goals: the simulated AL within 3 % of the real one, its tok/s within
10 % (it leaves out the drafter's own time: n-gram's matcher costs about 0.05 ms a step here).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from specbatch.bench import machine_header
from specbatch.common.atomic_files import atomic_write_text
from specbatch.config import compose_job
from specbatch.pipeline import run_job
from specbatch.run.status_merge import finished_summary

AL_GOAL = 0.03
TOK_S_GOAL = 0.10


def simulate_report(rows: int, repeats: int, root: Path, stamp: str) -> tuple[str, Path]:
    """The real n-gram runs and the simulated ones, alternating; the report and where it was written."""
    common = [f"max_samples={rows}", "sampling.ignore_eos=true", "tracking.experiment=bench", f"output_root={root}"]
    real: list[tuple[float, float]] = []
    simulated: list[tuple[float, float]] = []
    profile: Path | None = None
    for repeat in range(repeats):
        run = run_job(compose_job([*common, "spec=ngram", f"run_name=simulate-real-{stamp}", f"repeat={repeat}"]))
        real.append(_figures(run.folder.root))
        # The profile of the first real run is what every simulated run replays.
        profile = profile or run.folder.root
        run = run_job(
            compose_job(
                [*common, "spec=simulate", f"spec.profile={profile}", f"run_name=simulate-{stamp}", f"repeat={repeat}"]
            )
        )
        simulated.append(_figures(run.folder.root))
    al_real, al_sim = (statistics.median(f[0] for f in figures) for figures in (real, simulated))
    tok_real, tok_sim = (statistics.median(f[1] for f in figures) for figures in (real, simulated))
    al_ratio, tok_ratio = al_sim / al_real, tok_sim / tok_real
    lines = [
        f"# jobs/bench.py --simulate, {time.strftime('%Y-%m-%d %H:%M')}",
        machine_header(),
        "",
        f"## (i) n-gram k=3 and spec=simulate at its profile ({profile}), {rows} prompts, full batch, "
        f"sampling.ignore_eos=true, {repeats} runs each, alternating",
        "",
        "| set-up | AL per run | AL median | tok/s per run | tok/s median |",
        "|---|---|---|---|---|",
        _row("ngram k=3 (real)", real),
        _row("simulate k=3 (ngram's profile)", simulated),
        "",
        f"simulated / real: AL {al_ratio:.3f} (goal within {AL_GOAL:.0%}: "
        f"{'met' if abs(al_ratio - 1) <= AL_GOAL else 'missed'}), tok/s {tok_ratio:.3f} (goal within "
        f"{TOK_S_GOAL:.0%}: {'met' if abs(tok_ratio - 1) <= TOK_S_GOAL else 'missed'})",
    ]
    path = root / f"simulate-{stamp}.md"
    atomic_write_text(path, "\n".join(lines) + "\n")
    return "\n".join(lines), path


def _figures(root: Path) -> tuple[float, float]:
    summary = finished_summary(root)
    assert summary.mean_acceptance_length is not None, f"{root} drafted nothing"
    return summary.mean_acceptance_length, summary.output_tokens_per_second


def _row(name: str, figures: list[tuple[float, float]]) -> str:
    als = " / ".join(f"{al:.3f}" for al, _ in figures)
    rates = " / ".join(f"{rate:.1f}" for _, rate in figures)
    return (
        f"| {name} | {als} | {statistics.median(a for a, _ in figures):.3f} | {rates} | "
        f"{statistics.median(r for _, r in figures):.1f} |"
    )
