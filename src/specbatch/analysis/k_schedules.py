"""From a sweep's per-batch-size picks to a k schedule vLLM follows by itself (``spec.k_schedule``).

vLLM 0.32 takes ``num_speculative_tokens_per_batch_size``: ``[first batch size, last batch size, k]`` ranges, k=0
where speculation should stop. Its authors give no default because the best one depends on hardware and workload,
which is what a sweep measured. For each method, the k at a measured batch size is that method's pick against the
baseline (:mod:`specbatch.analysis.recommend`: median, the smaller k within noise, 0 where ``spec=none`` wins).

Ranges between measured batch sizes (documented in docs/comparing.md):
- measured size b_i covers b_i .. b_{i+1} − 1 (a size between two measurements takes the k of the smaller one:
  the best k falls as the batch grows, so this errs towards the k that was right for fewer requests);
- the smallest measured size also covers 1 .. b_1 − 1 (when batch size 1 was not measured);
- the largest covers up to the larger of itself and the ``engine.max_num_seqs`` its runs were started with: with
  fewer prompts than seats, the engine never ran more requests at once, and the job requires the schedule to cover
  every batch size up to ``engine.max_num_seqs``. Beyond that nothing was measured, so nothing is extrapolated;
- neighbouring ranges with the same k merge (the shape vLLM's own tuner writes).
"""

from __future__ import annotations

import json
import shlex
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specbatch.analysis.recommend import Recommendation
from specbatch.analysis.run_data import RunData
from specbatch.common.atomic_files import atomic_write_text
from specbatch.config import spec_caption

# The preset's name in the comparison folder's spec/ group: --config-dir <comparison> spec=k_schedule_<method>.
PRESET_PREFIX = "k_schedule_"
# Keys of the recorded spec section the preset writes itself (or that describe another schedule).
_OWN_KEYS = ("method", "num_speculative_tokens", "k_schedule")


@dataclass
class KSchedule:
    """One method's k schedule for one workload."""

    model: str
    dataset: str
    dtype: str
    workload: str
    method: str
    # [first batch size, last batch size, k], contiguous from 1; k=0 where spec=none won.
    ranges: list[list[int]]
    # Measured batch size → its k (0: spec=none won).
    picks: dict[int, int]
    # Whether every pick had MIN_REPEATS repeats of every set-up at its batch size.
    enough_repeats: bool
    # The method's recorded knobs (prompt lookup, spec.model, ...) besides method, k and schedule.
    knobs: dict[str, Any] = field(default_factory=dict)
    # The preset file's path, once written (write_schedules).
    preset: str | None = None

    @property
    def num_speculative_tokens(self) -> int:
        """The most any range drafts: vLLM sizes its buffers for it and every range's k must be at most it."""
        return max(k for _, _, k in self.ranges)

    @property
    def override(self) -> str:
        """The override that selects the schedule, in Hydra syntax (no spaces, so it is one shell word)."""
        return "spec.k_schedule=" + json.dumps(self.ranges, separators=(",", ":"))

    def overrides(self) -> list[str]:
        """Everything on the command line that runs this schedule without the preset file (Hydra syntax; quote
        each for the shell, see :meth:`command`). The batch is capped where the schedule ends: the job refuses a
        schedule that does not cover engine.max_num_seqs, and beyond it nothing was measured."""
        # Strings as Hydra's double-quoted strings (a path or hub id may hold characters Hydra would parse).
        knobs = [f"spec.{key}={json.dumps(value)}" for key, value in self.knobs.items()]
        k = f"spec.num_speculative_tokens={self.num_speculative_tokens}"
        return [f"spec={self.method}", k, *knobs, self.override, f"engine.max_num_seqs={self.ranges[-1][1]}"]

    def command(self) -> str:
        """The job's command line with this schedule, quoted for a POSIX shell."""
        return "python jobs/generate.py " + " ".join(shlex.quote(o) for o in self.overrides())

    def preset_command(self) -> str | None:
        """The job's command line selecting the written preset (its folder as a config dir); None before writing."""
        if self.preset is None:
            return None
        path = Path(self.preset)
        return (
            f"python jobs/generate.py --config-dir {shlex.quote(str(path.parents[1]))} spec={path.stem} "
            f"engine.max_num_seqs={self.ranges[-1][1]}"
        )

    @property
    def useful(self) -> bool:
        """False when spec=none won everywhere: there is nothing to schedule (run spec=none)."""
        return self.num_speculative_tokens > 0


def schedule_ranges(picks: dict[int, int], last: int) -> list[list[int]]:
    """Contiguous ``[first, last, k]`` ranges from 1 to ``last`` (see the module docstring for the rule).

    Raises ValueError without picks or with ``last`` below the largest measured batch size."""
    sizes = sorted(picks)
    if not sizes:
        raise ValueError("no measured batch size to build a schedule from")
    if last < sizes[-1]:
        raise ValueError(f"the schedule must reach the largest measured batch size {sizes[-1]}, not stop at {last}")
    ranges: list[list[int]] = []
    for i, size in enumerate(sizes):
        first = 1 if i == 0 else size
        end = sizes[i + 1] - 1 if i + 1 < len(sizes) else last
        if ranges and ranges[-1][2] == picks[size]:
            ranges[-1][1] = end
        else:
            ranges.append([first, end, picks[size]])
    return ranges


def build_schedules(recommendations: list[Recommendation], runs: list[RunData]) -> list[KSchedule]:
    """One schedule per workload and speculative method measured at two or more batch sizes (with one batch size a
    schedule is just that k: the recommendation says it already)."""
    by_key: dict[tuple[str, str], dict[int, Recommendation]] = defaultdict(dict)
    for rec in recommendations:
        for method in rec.k_per_method or {}:
            by_key[(rec.workload, method)][rec.batch_size] = rec
    out = []
    for (workload, method), recs in sorted(by_key.items()):
        if len(recs) < 2:
            continue
        picks = {size: (rec.k_per_method or {})[method] for size, rec in recs.items()}
        largest = max(picks)
        own = [r for r in runs if r.workload == workload and r.method == method]
        seats = [r.config["engine"].get("max_num_seqs") or 0 for r in own if r.batch_size == largest]
        first = next(iter(recs.values()))
        knobs = {
            key: value
            for key, value in sorted(own[0].config["spec"].items())
            if key not in _OWN_KEYS and value is not None
        }
        out.append(
            KSchedule(
                model=first.model,
                dataset=first.dataset,
                dtype=first.dtype,
                workload=workload,
                method=method,
                ranges=schedule_ranges(picks, max([largest, *seats])),
                picks=dict(sorted(picks.items())),
                enough_repeats=all(r.enough_repeats for r in recs.values()),
                knobs=knobs,
            )
        )
    return out


def preset_yaml(schedule: KSchedule) -> str:
    """The spec-group preset: the method's recorded knobs, k = the schedule's largest k, and the schedule."""
    picks = schedule.picks.items()
    sizes = ", ".join(f"{size}: {spec_caption(schedule.method, k) if k else 'none'}" for size, k in picks)
    lines = [
        f"# k schedule for {schedule.method} written by jobs/compare.py: {schedule.model}, {schedule.dataset}, "
        f"{schedule.dtype}.",
        f"# Picks per measured batch size (median speedup, the smaller k within noise; none = k 0): {sizes}.",
    ]
    if not schedule.enough_repeats:
        lines.append("# Provisional: some batch sizes had too few repeats to tell (see the comparison's notes).")
    lines += [
        f"# Use: {schedule.preset_command()}",
        f"# or:  {schedule.command()}",
        "defaults:",
        "  - base_spec",
        f"method: {schedule.method}",
        f"num_speculative_tokens: {schedule.num_speculative_tokens}",
        *(f"{key}: {json.dumps(value)}" for key, value in schedule.knobs.items()),
        f"k_schedule: {json.dumps(schedule.ranges)}",
    ]
    return "\n".join(lines) + "\n"


def write_schedules(schedules: list[KSchedule], out_dir: Path) -> list[Path]:
    """``<out_dir>/spec/k_schedule_<method>.yaml`` per useful schedule (``_<n>`` added when several workloads
    scheduled the same method); sets each schedule's ``preset``. Returns the files written."""
    written = []
    taken: set[str] = set()
    for schedule in (s for s in schedules if s.useful):
        name = PRESET_PREFIX + schedule.method
        number = 2
        while name in taken:
            name, number = f"{PRESET_PREFIX}{schedule.method}_{number}", number + 1
        taken.add(name)
        path = out_dir / "spec" / f"{name}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        schedule.preset = str(path)
        atomic_write_text(path, preset_yaml(schedule))
        written.append(path)
    return written
