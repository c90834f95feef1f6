"""spec=auto's candidates: each one a fixed set-up the job could run, built from the same presets ``spec=<method>``
composes (conf/spec/<method>.yaml, the checkpoint pairing of spec.auto.checkpoints), and the job each phase runs.

Everything here reads the config alone, so a candidate that cannot run is refused before anything loads, naming it.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import shlex
from dataclasses import dataclass
from functools import cache
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from specbatch.assets.cache import HEAD_BUILD_TIME, embedded_heads, unbuilt_embedded_head
from specbatch.common.environment import PROJECT_ROOT
from specbatch.config import ConfigError, JobConfig
from specbatch.config.overrides import hydra_override
from specbatch.config.schema import composed_section
from specbatch.config.spec import SpecConfig
from specbatch.engine import backend_class, validate_job
from specbatch.methods import AUTO_DEFAULT_CANDIDATES, CHECKPOINT_METHODS, PREDICTABLE, SpecMethod

log = logging.getLogger(__name__)

_LABEL = re.compile(r"^(?P<method>[a-z_0-9]+?)(?:-k(?P<k>\d+))?$")


@dataclass(frozen=True)
class Candidate:
    """One set-up spec=auto may choose: its label (a run folder's, e.g. ``ngram-k3``) and its checked spec."""

    label: str
    spec: SpecConfig
    # The Hydra overrides that run it as a fixed set-up, each quoted for a POSIX shell, e.g.
    # "spec=ngram spec.num_speculative_tokens=3" or "spec=eagle3 ... 'spec.model=/my heads/eagle3'".
    overrides: str = ""
    # How spec.auto.candidates spelled it: more than one when one set-up was listed several ways (``ngram``,
    # ``ngram-k3``, ``ngram-k03``), which are one candidate, measured once.
    spellings: tuple[str, ...] = ()

    @property
    def method(self) -> SpecMethod:
        return self.spec.method

    @property
    def predictable(self) -> bool:
        return self.spec.method in PREDICTABLE

    @property
    def caption(self) -> str:
        return self.spec.caption


def candidates(job: JobConfig) -> list[Candidate]:
    """spec.auto's candidates for ``job``, the baseline first; ConfigError naming spec.auto.candidates (or the
    candidate's own key) when one is not a set-up this job can describe."""
    auto = job.spec.auto
    assert auto is not None, "spec=auto jobs only"
    # The embedded model's own trained heads are its checkpoints unless spec.auto.checkpoints names others. Added
    # here, not by a preset: listed in the config, they would change the run-folder digest of every spec=auto run of
    # the embedded model made before they existed (a relaunch would no longer find its finished run).
    embedded = {method: {"model": str(path)} for method, path in embedded_heads(job.model.embedded).items()}
    checkpoints = {**embedded, **auto.checkpoints}
    if auto.candidates is None:
        labels = [*AUTO_DEFAULT_CANDIDATES, *(m for m, pairing in checkpoints.items() if _built(m, pairing))]
    else:
        labels = [str(c).strip() for c in auto.candidates]
    # One set-up however it is spelled: the first spelling's place is kept, and the candidate knows the others.
    by_label: dict[str, Candidate] = {}
    for spelling in labels:
        candidate = _candidate(spelling, checkpoints)
        first = by_label.setdefault(candidate.label, candidate)
        if spelling not in first.spellings:
            by_label[candidate.label] = dataclasses.replace(first, spellings=(*first.spellings, spelling))
    out = list(by_label.values())
    if auto.pilot is not None and pilot_spelled(auto.pilot, checkpoints) not in by_label | {"none": None}:
        raise ConfigError(
            f"spec.auto.pilot={auto.pilot} is not among spec.auto.candidates ({', '.join(by_label)}): pilot on one of "
            "them, or null for the likeliest"
        )
    if not any(c.method is SpecMethod.none for c in out):
        # The pilot is spec=none and every speedup is measured against it: it is always a candidate.
        out.insert(0, _candidate("none", checkpoints))
    out.sort(key=lambda c: c.method is not SpecMethod.none)
    return out


def pilot_spelled(pilot: str, checkpoints: dict[str, Any] | None = None) -> str:
    """spec.auto.pilot as a candidate's label (``ngram-k03`` is ``ngram-k3``); ConfigError naming it when it is not a
    set-up."""
    try:
        return _candidate(str(pilot).strip(), checkpoints or {}).label
    except ConfigError as exc:
        raise ConfigError(str(exc).replace("spec.auto.candidates", "spec.auto.pilot", 1)) from None


def _built(method: str, pairing: dict[str, Any]) -> bool:
    """A default candidate whose checkpoint is an embedded head not built yet is left out (building one takes hours
    on a CPU: a job of its own, not a side effect of spec=auto); said once per process."""
    model = pairing.get("model")
    if not unbuilt_embedded_head(model):
        return True
    if model not in _SAID_UNBUILT:
        _SAID_UNBUILT.add(model)
        log.warning(
            "spec=auto leaves %s out: its head %s is not built on this machine yet (build it once with "
            "`.venv/bin/python jobs/build_head.py`, or a first spec=%s job builds it)",
            method,
            model,
            method,
        )
    return False


_SAID_UNBUILT: set[str] = set()


def _candidate(label: str, checkpoints: dict[str, Any]) -> Candidate:
    match = _LABEL.match(label)
    methods = [m.value for m in SpecMethod if m is not SpecMethod.auto]
    if match is None or match["method"] not in methods:
        raise ConfigError(
            f"spec.auto.candidates: {label!r} is not a set-up: write none or <method>-k<k> with a method of "
            f"{', '.join(methods)}, e.g. [none,ngram-k3,suffix-k5]"
        )
    method = SpecMethod(match["method"])
    k = int(match["k"]) if match["k"] else None
    if method is SpecMethod.none and k is not None:
        raise ConfigError(f"spec.auto.candidates: {label!r}: the baseline drafts nothing; write none")
    knobs: dict[str, Any] = dict(_preset(method.value))
    if method in CHECKPOINT_METHODS:
        pairing = checkpoints.get(method.value)
        if pairing is None:
            raise ConfigError(
                f"spec.auto.candidates: {label} needs a draft checkpoint and spec.auto.checkpoints has none for "
                f"{method.value}: set spec.auto.checkpoints.{method.value}.model=<folder or hub id> (or pick a "
                f"model with conf/model_spec/<model>_auto.yaml), or drop {label}"
            )
        if unbuilt_embedded_head(pairing.get("model")):
            raise ConfigError(
                f"spec.auto.candidates: {label} drafts with {pairing['model']}, the embedded model's trained head, "
                "which is not built on this machine yet: build it once with `.venv/bin/python jobs/build_head.py` "
                f"({HEAD_BUILD_TIME}), or drop {label}"
            )
        knobs.update(pairing)
    if k is not None:
        knobs["num_speculative_tokens"] = k
    try:
        # The spec section as jobs compose it (the backends' spec knobs, e.g. spec.draft_gguf, included).
        spec = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(composed_section("spec")), knobs))
    except (ConfigError, OmegaConfBaseException) as exc:
        cause = exc if isinstance(exc, ConfigError) else (exc.__cause__ or exc)
        raise ConfigError(f"spec.auto.candidates: {label}: {cause}") from None
    assert isinstance(spec, SpecConfig)
    overrides = [f"spec={method.value}"]
    if method is not SpecMethod.none:
        overrides.append(f"spec.num_speculative_tokens={spec.k}")
    overrides += [
        hydra_override(f"spec.{key}", value)
        for key, value in checkpoints.get(method.value, {}).items()
        if key != "num_speculative_tokens"
    ]
    # A checkpoint path may hold a space: each override one shell word (python jobs/serve.py --print <overrides>).
    return Candidate(spec.label, spec, " ".join(shlex.quote(o) for o in overrides))


@cache
def _preset(method: str) -> dict[str, Any]:
    """conf/spec/<method>.yaml's own values (what ``spec=<method>`` composes, its defaults list aside)."""
    node = OmegaConf.load(PROJECT_ROOT / "conf" / "spec" / f"{method}.yaml")
    values = OmegaConf.to_container(node)
    assert isinstance(values, dict)
    values.pop("defaults", None)
    return values


def preset_k(method: SpecMethod) -> int | None:
    """The k ``spec=<method>`` composes (conf/spec/<method>.yaml), None for a method whose preset names none."""
    k = _preset(method.value).get("num_speculative_tokens")
    return int(k) if isinstance(k, int) else None


def candidate_jobs(job: JobConfig, of: list[Candidate] | None = None) -> list[JobConfig]:
    """The job of every candidate (``of``: candidates(job) already composed), each refused here (naming it) when the
    backend cannot run it: the checks specbatch.engine.validate_job runs for a spec=auto job, before anything is
    written or loaded."""
    validate_job(job)
    backend = backend_class(job.engine.backend)
    jobs = []
    for candidate in candidates(job) if of is None else of:
        each = candidate_job(job, candidate)
        try:
            backend.validate(each)
        except ConfigError as exc:
            raise ConfigError(
                f"spec.auto.candidates: {candidate.label} cannot run on engine.backend={job.engine.backend}: {exc}. "
                f"Drop {candidate.label} from spec.auto.candidates"
            ) from None
        jobs.append(each)
    return jobs


def candidate_job(job: JobConfig, candidate: Candidate) -> JobConfig:
    """The job one phase runs: ``job`` with the candidate's spec (so its rows name the set-up that made them)."""
    try:
        return dataclasses.replace(job, spec=candidate.spec)
    except ConfigError as exc:
        raise ConfigError(f"spec.auto.candidates: {candidate.label} cannot run with this job: {exc}") from None


def scheduled(candidate: Candidate, schedule: list[list[int]]) -> Candidate:
    """``candidate``'s method with a k per batch size (spec.k_schedule, k = 0 where speculation is off): the set-up
    spec=auto's choice per batch occupancy runs (specbatch.auto.schedule). Its k is the schedule's largest."""
    k = max(entry[2] for entry in schedule)
    try:
        spec = dataclasses.replace(candidate.spec, num_speculative_tokens=k, k_schedule=[list(e) for e in schedule])
    except ConfigError as exc:
        raise ConfigError(f"spec=auto: {candidate.label} cannot follow the k schedule {schedule}: {exc}") from None
    written = "[" + ",".join(f"[{a},{b},{c}]" for a, b, c in schedule) + "]"
    own_k = f"spec.num_speculative_tokens={candidate.spec.k}"
    overrides = candidate.overrides.replace(own_k, f"spec.num_speculative_tokens={k}")
    return Candidate(spec.label, spec, f"{overrides} {shlex.quote(f'spec.k_schedule={written}')}")
