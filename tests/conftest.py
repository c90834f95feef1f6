"""Shared test helpers: compose the real conf/ the way jobs/generate.py does, then shrink it for tests."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from mlflow_server import MlflowServer, start_mlflow_server
from specbatch.backends.dummy.dummy import DummyEngine
from specbatch.common.interrupts import forget_stop
from specbatch.config import JobConfig, register_configs, to_job_config
from specbatch.engine import engine_fingerprint, validate_job

PROJECT_ROOT = Path(__file__).resolve().parents[1]
CONF_DIR = PROJECT_ROOT / "conf"
GENERATE = PROJECT_ROOT / "jobs" / "generate.py"
# First bytes of every PNG file (plots and screenshots are checked against it).
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

register_configs()


def compose_config(overrides: list[str] | None = None) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="config", overrides=overrides or [])


def compose_job(overrides: list[str] | None = None) -> JobConfig:
    """The job as jobs/generate.py composes it and checks it before anything is written: the config's own checks,
    then the backend's (Engine.validate)."""
    job = to_job_config(compose_config(overrides))
    validate_job(job)
    return job


def run_generate(
    args: list[str], timeout: float = 900, env: dict[str, str] | None = None, cwd: Path = PROJECT_ROOT
) -> subprocess.CompletedProcess[str]:
    """Run jobs/generate.py as users do, in a child process (vLLM needs its own __main__ for spawn)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, str(GENERATE), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def job_factory(tmp_path: Path) -> Callable[..., JobConfig]:
    """Compose the real config with overrides, writing into this test's tmp folder."""

    def make(*overrides: str) -> JobConfig:
        return compose_job([f"output_root={tmp_path / 'outputs'}", *overrides])

    return make


@pytest.fixture
def local_job_factory(job_factory, tmp_path: Path) -> Callable[..., JobConfig]:
    """Jobs over a small local JSONL file with rows r0..r<rows-1>: ``spec`` (none unless given: Hydra refuses a second
    ``spec=`` override), chunk_size=2 unless overridden."""

    def make(*extra: str, rows: int, spec: str = "none") -> JobConfig:
        data = tmp_path / f"rows-{rows}.jsonl"
        data.write_text("".join(json.dumps({"id": f"r{i}", "q": f"question {i}"}) + "\n" for i in range(rows)))
        return job_factory(
            f"spec={spec}",
            "dataset=local",
            f"dataset.path={data}",
            "dataset.template='{q}'",
            "dataset.id_column=id",
            *([] if any(e.startswith("chunk_size=") for e in extra) else ["chunk_size=2"]),
            *extra,
        )

    return make


@pytest.fixture(autouse=True)
def _a_stop_is_one_tests() -> Iterator[None]:
    """A stop signal a test sends its own process (specbatch.common.interrupts remembers it for the process, so that
    nothing begins after it) ends with the test."""
    yield
    forget_stop()


def fake_engine(job: JobConfig, die_after: int | None = None, **options: Any) -> DummyEngine:
    """The dummy backend for logic tests: one request at a time, every answer 2 tokens, so requests (and chunks)
    finish in the order they were added. ``die_after=n``: the step after the n-th completion raises
    KeyboardInterrupt, like a kill in the middle of the stream (nothing in flight may count)."""
    return DummyEngine(
        engine_fingerprint(job),
        k=job.spec.k,
        concurrency=1,
        length=2,
        die_after=die_after,
        keep_requests=True,
        **options,
    )


def asked_rows(engine: DummyEngine) -> list[str]:
    """Row ids (with the turn when it is not 1) the engine was asked to generate, in order."""
    return [r.row_id if r.turn == 1 else f"{r.row_id}@{r.turn}" for r in engine.added]


def kill_job_group_when(args: list[str], ready: Callable[[], bool], what: str, timeout: float = 600) -> None:
    """Run jobs/generate.py in its own session until ``ready()``, then SIGKILL the whole group, as a node loss would
    (the engine's processes die with it). Fails if the job ends first or ``what`` does not happen in time."""
    proc = subprocess.Popen(
        [sys.executable, str(GENERATE), *args],
        cwd=PROJECT_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + timeout
        while not ready():
            assert proc.poll() is None, f"the job ended before {what}"
            assert time.monotonic() < deadline, f"no {what} within {timeout:.0f} s"
            time.sleep(0.1)
    finally:
        # The group may be gone already (the job ended first): the assertion above is what the test must show.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


class LiveJob:
    """jobs/generate.py running in the background, its output (stdout and stderr together) read as it comes, so a
    test can act at a given moment (kill a server, send SIGTERM) without the pipe filling up and blocking the job."""

    def __init__(self, command: list[str], env: dict[str, str] | None = None) -> None:
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self.process = subprocess.Popen(
            command,
            cwd=PROJECT_ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            # A process group of its own, as a job started from a shell or by Slurm has: signal_group reaches the
            # job and whatever stayed in its group, never pytest.
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    @classmethod
    def generate(cls, args: list[str], env: dict[str, str] | None = None) -> LiveJob:
        return cls([sys.executable, str(GENERATE), *args], env)

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()

    @property
    def output(self) -> str:
        with self._changed:
            return "".join(self.lines)

    def wait_for(self, text: str, timeout: float) -> None:
        """Until a line containing ``text`` was printed; fails with the output if the job ends or time runs out."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not any(text in line for line in self.lines):
                left = deadline - time.monotonic()
                if left <= 0 or (self.process.poll() is not None and not self._reader.is_alive()):
                    raise AssertionError(f"never saw {text!r}; output:\n{''.join(self.lines)[-4000:]}")
                self._changed.wait(timeout=min(left, 1.0))

    def signal_group(self, signum: int) -> None:
        """As Ctrl-C (SIGINT), ``timeout`` or ``kill -TERM -- -<pgid>`` do: the job's whole process group."""
        os.killpg(self.process.pid, signum)

    def signal_every_process(self, signum: int) -> list[int]:
        """As Slurm does at a time limit or ``scancel``: the job and every process it started, whatever their group
        or session (Slurm finds them through the step's cgroup). Returns the pids signalled."""
        job = psutil.Process(self.process.pid)
        processes = [job, *job.children(recursive=True)]
        for process in processes:
            with contextlib.suppress(psutil.Error):
                process.send_signal(signum)
        return [p.pid for p in processes]

    def wait(self, timeout: float) -> int:
        code = self.process.wait(timeout=timeout)
        self._reader.join(timeout=30)
        return code


@pytest.fixture
def mlflow_server(tmp_path: Path) -> Iterator[MlflowServer]:
    """A real ``mlflow server`` on 127.0.0.1 (sqlite store, artifacts over HTTP) in this test's tmp folder.

    Yields an object with ``.uri`` (pass it as ``tracking.uri=...``), ``.process``, ``.stop()`` and ``.kill()``.
    Function-scoped so a test may kill it; for one server per module, use ``start_mlflow_server`` in a
    module-scoped fixture (see tests/mlflow_server.py).
    """
    with start_mlflow_server(tmp_path / "mlflow-server") as server:
        yield server


def assert_one_line_stop(output: str) -> None:
    """The stop is said once, by the job: no traceback, no Hydra hint, no engine-death error in the job's own output.
    (vLLM's engine processes, when signalled themselves, log their own shutdown, traceback included: records whose
    first line is theirs are left out.)"""
    own = "".join(record for record in log_records(output) if not record.startswith(VLLM_PROCESSES))
    for noise in ("Traceback", "HYDRA_FULL_ERROR", "EngineDeadError", "died unexpectedly"):
        assert noise not in own, own[-3000:]
    assert own.count("stopped by SIG") == 1, own[-3000:]


# How vLLM prefixes the log lines of its engine processes.
VLLM_PROCESSES = ("(EngineCore", "(Worker", "(VllmWorker")


def log_records(output: str) -> list[str]:
    """Log records: a record starts with a line that starts with a log header ('[' or '(' for vLLM's processes);
    the lines after it (a traceback, a warning's source line) belong to it."""
    records: list[str] = []
    for line in output.splitlines(keepends=True):
        if line.startswith(("[", "(")) or not records:
            records.append(line)
        else:
            records[-1] += line
    return records


# Tests that start the llama-server jobs/test.sh builds beside the suite: run after the vLLM files, once it is built.
NEEDS_LLAMA_SERVER = "needs_llama_server"
# How long a llama.cpp test waits for that build: it takes 8 minutes of both cores, longer beside the tests.
LLAMA_BUILD_BOUND_SECONDS = 45 * 60


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{NEEDS_LLAMA_SERVER}: starts llama-server, once it is built")
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        config.stash[WORKER_TMP] = isolate_worker(worker)


def pytest_unconfigure(config: pytest.Config) -> None:
    if WORKER_TMP in config.stash:
        shutil.rmtree(config.stash[WORKER_TMP], ignore_errors=True)


# jobs/test.sh runs the suite in pytest-xdist workers, one test file per worker at a time (--dist loadfile: a
# module's shared engine serves its tests in one process). The temporary folder this worker made for itself.
WORKER_TMP = pytest.StashKey[Path]()


def isolate_worker(worker: str) -> Path:
    """What one xdist worker and the jobs its tests start need so that another worker running beside it changes
    nothing they see:
    - a temporary folder of its own (TMPDIR, inherited by every job): vLLM puts its IPC sockets and rendezvous files
      there, and tests count them before and after a job to show that a stop leaves none;
    - one thread per vLLM engine (unless OMP_NUM_THREADS / NUMBA_NUM_THREADS are set): vLLM's CPU engine ends every
      step at an OpenMP barrier, so an engine with a thread per core, beside anything busy, waits at every step for
      its thread that lost its core (measured: a busy loop on the other core made an n-gram job 3.2x slower; with
      one thread, not slower at all). Numba's too: at the first call of vLLM's n-gram matcher (numba, parallel)
      its OpenMP layer sets the process's OpenMP team, torch's included, to NUMBA_NUM_THREADS (default: every core).
    Returns the folder, removed when the worker ends."""
    tmp = Path(tempfile.mkdtemp(prefix=f"specbatch-{worker}-"))
    os.environ["TMPDIR"] = str(tmp)
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")
    return tmp


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files in the order that ends the suite soonest on two xdist workers (jobs/test.sh keeps it: --dist loadfile
    --no-loadscope-reorder): the files that start vLLM first, then the llama.cpp file, so the build beside the
    tests has had the most time, then the quick files, which the other worker runs while llama.cpp's do. The sort
    is stable: inside each group, files keep their collection order."""
    groups: dict[Path, int] = {}
    for item in items:
        group = 1 if item.get_closest_marker(NEEDS_LLAMA_SERVER) else 0 if item.get_closest_marker("slow") else 2
        groups[item.path] = min(groups.get(item.path, 2), group)
    items.sort(key=lambda item: groups[item.path])


def wait_for_llama_build(bound: float = LLAMA_BUILD_BOUND_SECONDS) -> None:
    """Wait until the llama-server build jobs/test.sh started beside the tests has ended (a no-op without one).
    Whether it worked is what the tests then find: jobs/llama_cpp.sh path, named in the job's error."""
    pid = os.environ.get("SPECBATCH_LLAMA_BUILD_PID")
    if not pid:
        return
    deadline = time.monotonic() + bound
    while _running(int(pid)):
        assert time.monotonic() < deadline, f"the llama-server build (pid {pid}) is still running after {bound:.0f} s"
        time.sleep(2)


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_group_gone(group: int, timeout: float) -> list[psutil.Process]:
    """The live members of process group ``group`` once it has none left, or when ``timeout`` seconds have passed."""
    from specbatch.serving.child_server import _group_members

    deadline = time.monotonic() + timeout
    while (left := _group_members(group)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left
