"""The set-up a spec=auto shard pilots on: the likeliest winner, so that when it wins nothing switches (issue 67).

Greedy lossless completions do not depend on the set-up that made them, so the pilot's rows predict every n-gram and
suffix candidate whichever set-up ran them; what the pilot's set-up decides is what the pilot costs and whether its
engine can stay for the rest. Earlier runs of the same kind of job say which set-up that is. A run matches when it is
in the same ``output_root`` (the same data set and model folder, RunFolder.for_job), finished, and ran the same
target (model path and dtype) with the same sampling (greedy or not, and n) at the same batch (engine.max_num_seqs);
its set-up must be one of this job's candidates. spec.auto.pilot, when set, names it instead; else, in this order:

1. the winner of the latest matching spec=auto run (its decision.json), unless the fixed runs of 2. made another
   candidate faster than that winner's own fixed runs: by more than a whole run's noise (UNMEASURED_MARGIN) when
   that decision measured slices, by any margin when it only predicted (``measured`` false). Whole runs outrank a
   few slices beyond their noise, and a prediction outright: at the full batch a shard cannot measure, so its pilot
   is kept, and a predicted decision would otherwise pass itself on from run to run however wrong it was (help-desk
   at the full batch: rounds 5 and 6 kept an n-gram k 1 pilot predicted 0.99x spec=none, while six rounds of fixed
   1,000-row runs made k 1 a median 122 generation tok/s to spec=none's 131);
2. the fastest set-up of the matching fixed runs, by the median of each one's generation tok/s (its summary over
   every shard), compared like with like:
   among the runs of one size (max_samples and sampling.max_tokens), the size nearest this job's of those that
   compare two set-ups or more (the same new tokens first, then the nearest number of rows). A run's tok/s depends on
   its size as much as on its set-up: on the bench's help-desk cell at the full batch (256), n-gram k5 made 104 tok/s
   and spec=none 81 in 200-row runs, which never fill the batch, but 127-130 and 128-139 in 1,000-row runs;
3. else the prior: the first candidate replay can predict and whose engine can change its k in place (n-gram), at its
   preset's k (conf/spec/<method>.yaml: n-gram k 3, the set-up people start with) if listed; else the first
   predictable candidate; else the first speculative one. A learned drafter is not the prior's pilot: its steps
   would price the predictable candidates wrongly.

The pilot comes from the runs of that one size. Each other candidate is judged against
the pilot's set-up among the runs of the size nearest the job's *that ran both* (:func:`against_pilot`), which
spec=auto's plan reads to bound each prediction by: a set-up a short sweep measured slower than the pilot's stays
so once longer runs of the others exist, which never ran it (help-desk at batch 16: the 200-row sweep made n-gram
k 2 0.93x spec=none; reading the first round's 1,000-row runs of none, suffix and n-gram k 1 instead, the second
round's auto measured k 2 in an engine of its own, two start-ups and its slices, and ran 4.8 % behind spec=none's
run of that round). :func:`ruled_out` leaves out a learned drafter an earlier run of this kind measured too slow to
win, compared the same way.
When those runs leave nothing to measure beside the pilot (:func:`nothing_to_measure`), the shard knows it before
its pilot runs, and the pilot heads an ordinary stream rather than slices that drain the engine.
"""

from __future__ import annotations

import logging
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specbatch.auto.candidates import Candidate, pilot_spelled, preset_k
from specbatch.auto.decision import UNMEASURED_MARGIN, slower_before
from specbatch.config import JobConfig, spec_label
from specbatch.methods import METHODS, SpecMethod
from specbatch.run.folder import RunFolder
from specbatch.run.records.record_files import RecordError
from specbatch.run.status_merge import RunIncompleteError, finished_summary

log = logging.getLogger(__name__)

# A run of every row (max_samples null), as a number of rows to compare sizes by.
ALL_ROWS = 1e12


@dataclass(frozen=True)
class Likeliest:
    """The pilot's set-up and why (``source``: the run it came from, or the prior)."""

    label: str
    source: str

    def to_dict(self) -> dict[str, str]:
        return {"label": self.label, "source": self.source}


def likeliest(
    job: JobConfig, candidates: list[Candidate], runs: dict[Path, dict[str, Any]] | None = None
) -> Likeliest:
    """The pilot's set-up for ``job`` among ``candidates`` (module docstring), or the one spec.auto.pilot names.
    ``runs``: :func:`matching_runs`, when the caller has read them already."""
    auto = job.spec.auto
    labels = {c.label for c in candidates}
    if auto is not None and auto.pilot is not None:
        wanted = str(auto.pilot).strip()
        named = [c.label for c in candidates if wanted == c.label or wanted in c.spellings]
        label = named[0] if named else pilot_spelled(wanted, auto.checkpoints)
        return Likeliest(label, f"spec.auto.pilot={auto.pilot}")
    configs = matching_runs(job) if runs is None else runs
    rates = _fixed_rates(configs, labels, job)
    fastest = max(rates.items(), key=lambda item: item[1][0]) if rates else None
    decided = [
        (root, d["winner"], bool(d.get("measured")))
        for root in configs
        if (d := _decision(root)) and d.get("winner") in labels
    ]
    if decided:
        root, winner, measured = max(decided, key=lambda item: _mtime(item[0] / "decision.json"))
        # A decision that measured slices stands within a whole run's noise; one that only predicted is no
        # measurement, and the fixed runs' medians outrank it outright.
        margin = UNMEASURED_MARGIN if measured else 1.0
        if fastest is None or winner not in rates or fastest[1][0] <= rates[winner][0] * margin:
            return Likeliest(winner, f"the decision of the earlier spec=auto run {root}")
        label, (rate, said) = fastest
        beyond = f"more than {margin:g}x" if measured else "faster than"
        how = "measured on slices" if measured else "predicted, not measured"
        return Likeliest(
            label,
            f"the fastest earlier fixed runs of this kind, {said} ({rate:.1f} tok/s), {beyond} {winner}'s "
            f"({rates[winner][0]:.1f}), the decision ({how}) of the earlier spec=auto run {root}",
        )
    if fastest is not None:
        label, (rate, said) = fastest
        return Likeliest(label, f"the fastest earlier fixed runs of this kind, {said} ({rate:.1f} tok/s)")
    speculative = [c for c in candidates if c.method is not SpecMethod.none]
    predictable = [c for c in speculative if c.predictable]
    rotating = [c for c in predictable if METHODS[c.method].k_schedule_refusal is None]
    preset = [c for c in rotating if c.spec.k == preset_k(c.method)]
    chosen = (preset or rotating or predictable or speculative or [None])[0]
    return Likeliest(
        chosen.label if chosen is not None else "none",
        "prior: no earlier run of this model, data set, sampling and batch in output_root",
    )


def against_pilot(
    job: JobConfig, candidates: list[Candidate], pilot: str, runs: dict[Path, dict[str, Any]] | None = None
) -> dict[str, tuple[float, float]]:
    """Each other candidate's earlier fixed runs of this kind and the ``pilot``'s, median tok/s, among the runs of
    the size nearest the job's that ran both (module docstring): label -> (its tok/s, the pilot's). Candidates no
    size ran beside the pilot are left out, and so are learned drafters: no prediction to bound, and whether one is
    measured again is :func:`ruled_out`'s call, with the prediction's error as its margin. ``runs``: as
    :func:`likeliest`'s."""
    return _against(
        _by_size(matching_runs(job) if runs is None else runs, {c.label for c in candidates}), job, candidates, pilot
    )


def _against(
    by_size: dict[tuple[float, float], dict[str, Any]], job: JobConfig, candidates: list[Candidate], pilot: str
) -> dict[str, tuple[float, float]]:
    out = {}
    for c in candidates:
        judged = c.predictable or c.method is SpecMethod.none
        if judged and c.label != pilot and (group := _nearest(by_size, job, having=(c.label, pilot))):
            out[c.label] = (group[c.label][0], group[pilot][0])
    return out


def ruled_out(
    job: JobConfig, candidates: list[Candidate], runs: dict[Path, dict[str, Any]] | None = None
) -> dict[str, str]:
    """The learned drafters an earlier fixed run of this kind measured slower than another candidate beyond the
    prediction's error, each with why: measuring them again would cost an engine start-up for a set-up that cannot
    win. Each is compared like with like too, but among the runs of the size nearest the job's *that ran it*: a
    head a short sweep ran at 0.65x spec=none stays ruled out once 1,000-row runs of the other set-ups exist, which
    the pilot is chosen from and which never ran it. ``runs``: as :func:`likeliest`'s."""
    return _ruled(
        _by_size(matching_runs(job) if runs is None else runs, {c.label for c in candidates}), job, candidates
    )


def _ruled(
    by_size: dict[tuple[float, float], dict[str, Any]], job: JobConfig, candidates: list[Candidate]
) -> dict[str, str]:
    out = {}
    for c in candidates:
        if c.predictable or c.method is SpecMethod.none:
            continue
        rates = _nearest(by_size, job, having=(c.label,))
        if c.label not in rates:
            continue
        rate, said = rates[c.label]
        faster = [(r, other) for other, (r, _) in rates.items() if r > rate * UNMEASURED_MARGIN]
        if faster:
            best, other = max(faster)
            out[c.label] = f"earlier runs of this kind, {said}, made {rate:.1f} tok/s, {other}'s {best:.1f}"
    return out


def earlier_verdicts(
    job: JobConfig, candidates: list[Candidate], pilot: str, runs: dict[Path, dict[str, Any]] | None = None
) -> tuple[dict[str, tuple[float, float]], dict[str, str]]:
    """:func:`against_pilot` and :func:`ruled_out` from one reading of the earlier runs' tok/s (each run's summary
    is read once, not once per question). ``runs``: as :func:`likeliest`'s."""
    by_size = _by_size(matching_runs(job) if runs is None else runs, {c.label for c in candidates})
    return _against(by_size, job, candidates, pilot), _ruled(by_size, job, candidates)


def nothing_to_measure(
    job: JobConfig, candidates: list[Candidate], pilot: str, runs: dict[Path, dict[str, Any]] | None = None
) -> str | None:
    """Why a shard piloting on ``pilot`` would measure nothing, known before its pilot runs: earlier fixed runs of
    this kind made every other candidate no faster than the pilot's set-up by more than a whole run's noise
    (:func:`against_pilot`, decision.slower_before with UNMEASURED_MARGIN), or ruled it out (:func:`ruled_out`).
    Within that noise whole runs cannot tell two set-ups apart, and neither can the few slices that would measure
    them (a slice's tok/s moves more than a whole run's), so draining the engine for those slices buys nothing: the
    bench's help-desk cell at batch 16, round 4, drained its pilot's slices and then measured nothing because round
    3's fixed n-gram k 1 run had made 111.2 generation tok/s to spec=none's best 109.9 (1.01x; one set-up's runs
    there were 10 % apart). The replay may still switch to such a set-up after the pilot (the plan's
    ``slower_before`` keeps the strict comparison). None when one is left to measure, or when
    spec.auto.always_measure asks for the slices. ``runs``: as :func:`likeliest`'s."""
    auto = job.spec.auto
    if auto is not None and auto.always_measure:
        return None
    runs = matching_runs(job) if runs is None else runs
    against, ruled = earlier_verdicts(job, candidates, pilot, runs)
    passed = set(slower_before(against, UNMEASURED_MARGIN)) | set(ruled)
    # Only what earlier runs say: with none of them, nothing is known before the pilot (spec.auto.candidates=[none,
    # eagle3-k3] with the head ruled out has nothing to compare beside the pilot, and still nothing to measure).
    if not (against or ruled) or any(c.label not in passed for c in candidates if c.label != pilot):
        return None
    compared = ", ".join(
        f"{label} {rate:.1f} tok/s to {pilot_rate:.1f}" for label, (rate, pilot_rate) in against.items()
    )
    said = f" ({compared}, each on the runs of the nearest size that ran both)" if compared else ""
    return (
        f"earlier fixed runs of this kind made no other candidate faster than {pilot} by more than a whole run's "
        f"noise ({UNMEASURED_MARGIN:g}x){said} or ruled it out: nothing is left to measure, so the pilot heads the "
        "shard's stream"
    )


def matching_runs(job: JobConfig) -> dict[Path, dict[str, Any]]:
    """The earlier runs of this kind (module docstring) and their configs, each run's record read once: its config
    says whether it matches and, for a fixed run, its set-up."""
    own = RunFolder.for_job(job).root
    return {root: config for root in earlier_runs(own) if (config := _config(root)) and _matches(job, config)}


def _fixed_rates(
    configs: dict[Path, dict[str, Any]], labels: set[str], job: JobConfig
) -> dict[str, tuple[float, str]]:
    """Each set-up's median run among the runs of one size (module docstring: like with like)."""
    return _nearest(_by_size(configs, labels), job)


def _by_size(configs: dict[Path, dict[str, Any]], labels: set[str]) -> dict[tuple[float, float], dict[str, Any]]:
    """The median tok/s of each of ``labels``' runs per run size, and which runs: size -> label -> (tok/s, the runs
    said). The median, not the fastest: one run's whole-job figure moves by 10 % or more here, so the fastest of
    several runs favours the set-up that ran most often or varies most (help-desk at the full batch: n-gram k 1's
    six 1,000-row runs made 106-144 generation tok/s, median 122, spec=none's 128-139, median 131; the fastest runs
    ranked k 1 first)."""
    runs: dict[tuple[float, float], dict[str, list[tuple[float, Path]]]] = {}
    for root, config in configs.items():
        label = _fixed_label(config)
        if label in labels and (rate := _rate(root)):
            sampling = config.get("sampling") or {}
            size = _size(config.get("max_samples"), sampling.get("max_tokens"))
            runs.setdefault(size, {}).setdefault(label, []).append((rate, root))
    return {
        size: {label: (statistics.median(r for r, _ in made), _runs_said(made)) for label, made in group.items()}
        for size, group in runs.items()
    }


def _runs_said(made: list[tuple[float, Path]]) -> str:
    """Which runs a rate comes from: the one run's folder, or the median of several and their folders' names."""
    if len(made) == 1:
        return str(made[0][1])
    names = ", ".join(f"{root.name} {rate:.1f}" for rate, root in sorted(made, key=lambda m: m[1].name))
    return f"the median of {len(made)} runs in {made[0][1].parent} ({names})"


def _nearest(
    by_size: dict[tuple[float, float], dict[str, Any]], job: JobConfig, having: tuple[str, ...] = ()
) -> dict[str, tuple[float, str]]:
    """The runs of the size nearest ``job``'s (module docstring), among the sizes that ran every one of ``having``."""
    sizes = [size for size, group in by_size.items() if all(label in group for label in having)]
    if not sizes:
        return {}
    rows, tokens = _size(job.max_samples, job.sampling.max_tokens)

    def nearness(size: tuple[float, float]) -> tuple[bool, bool, float]:
        # Runs that compare set-ups first, then the same new tokens per row, then the nearest number of rows.
        return len(by_size[size]) > 1, size[1] == tokens, -abs(math.log(size[0]) - math.log(rows))

    return by_size[max(sizes, key=nearness)]


def _size(rows: int | None, tokens: int | None) -> tuple[float, float]:
    """A run's size as compared: its rows (max_samples; every row: ALL_ROWS) and new tokens per row."""
    return (float(rows) if rows else ALL_ROWS, float(tokens) if tokens else 0.0)


def earlier_runs(own: Path) -> list[Path]:
    """The run folders beside ``own`` (same data set and model), itself left out."""
    parent = own.parent
    if not parent.is_dir():
        return []
    return sorted(p for p in parent.iterdir() if p.is_dir() and p != own and (p / "run.json").is_file())


def _config(root: Path) -> dict[str, Any] | None:
    try:
        return RunFolder(root).read_run_record().get("config")
    except (FileNotFoundError, RecordError, OSError, ValueError):
        return None


def _matches(job: JobConfig, config: dict[str, Any]) -> bool:
    model, sampling, engine = config.get("model", {}), config.get("sampling", {}), config.get("engine", {})
    greedy = not (sampling.get("temperature") or 0)
    return (
        str(model.get("path")) == str(job.model.path)
        and str(model.get("dtype")) == str(job.model.dtype)
        and greedy == (not job.sampling.temperature)
        and (sampling.get("n") or 1) == (job.sampling.n or 1)
        and engine.get("max_num_seqs") == job.engine.max_num_seqs
    )


def _decision(root: Path) -> dict[str, Any] | None:
    try:
        return RunFolder(root).read_decision()
    except (RecordError, OSError, ValueError):
        return None


def _fixed_label(config: dict[str, Any]) -> str | None:
    spec = config.get("spec") or {}
    method = spec.get("method")
    if not method or method == "auto":
        return None
    return spec_label(method, spec.get("num_speculative_tokens"), spec.get("k_schedule"))


def _rate(root: Path) -> float | None:
    try:
        return finished_summary(root).output_tokens_per_second or None
    except (RunIncompleteError, FileNotFoundError, RecordError, OSError, ValueError):
        return None


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
