"""vLLM's OpenAI server for a job, as a child process: started, waited for until healthy, and stopped with its group.

The server runs ``vllm_serve_argv(job)`` (every ``llm_kwargs`` argument of the offline job as a flag) with the
environment the offline engine sets (``vllm_environment``), so what it serves is what the job measures.

Processes: the server gets its own session, hence its own process group holding its API process and vLLM's engine
processes; :meth:`VllmServer.stop` ends that whole group (SIGTERM, SIGKILL after a grace period), and a Ctrl-C in the
terminal reaches only jobs/serve.py, which then stops the server in order. If the parent is killed outright
(``kill -9``), the reaper of :mod:`specbatch.engine.reaper`, started before the server, finds the server among the
dead parent's descendants and ends them and their shared memory, exactly as it does for the offline engine.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

import httpx
import psutil

from specbatch.assets.cache import EmbeddedAssetError
from specbatch.assets.prepare import ensure_embedded
from specbatch.config import ConfigError, JobConfig
from specbatch.config.preflight import preflight
from specbatch.engine.reaper import Reaper, shm_used_by
from specbatch.engine.serve_commands import VLLM_API_KEY, listen_address, vllm_console_script_broken, vllm_serve_argv
from specbatch.engine.vllm_offline import vllm_environment

log = logging.getLogger(__name__)

# Between SIGTERM to the server's group and SIGKILL (vLLM's API and engine processes stop in about 5 s on CPU).
GRACE_SECONDS = 15.0
# How often /health is asked while the server starts (start-up takes 20-40 s on CPU, minutes for a big GPU model).
POLL_SECONDS = 0.5
# Lines of the server's log quoted when it fails.
TAIL_LINES = 30


class ServerStartError(RuntimeError):
    """The server exited or did not answer /health in time; the message quotes the end of its log."""


def server_process_environment(job: JobConfig, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The server's environment: ``environ`` (default os.environ) over ``vllm_environment(job)`` (so an explicit
    value wins, as in the offline engine), and the API key of ``engine.api_key_env`` as ``VLLM_API_KEY``, which
    vLLM reads, so the key never appears in an argv. The server takes the key the job sends, or none."""
    environ = os.environ if environ is None else environ
    env = {**vllm_environment(job), **environ}
    env.pop(VLLM_API_KEY, None)
    key = environ.get(job.engine.api_key_env)
    if key:
        env[VLLM_API_KEY] = key
    elif environ.get(VLLM_API_KEY):
        log.warning(
            "%s is set but %s (engine.api_key_env) is not: the server starts without a key, since the job would "
            "send none; export %s to require one",
            VLLM_API_KEY,
            job.engine.api_key_env,
            job.engine.api_key_env,
        )
    return env


def check_port_free(job: JobConfig) -> None:
    """Refuse, naming engine.url, a port something already listens on or a host that is not this machine's."""
    host, port = listen_address(job)
    url = job.engine.url
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as probe:
            # As a server binds: a port in TIME_WAIT is free, one with a listener is not.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except socket.gaierror as exc:
        raise ConfigError(f"engine.url={url}: host {host} cannot be resolved ({exc}); use e.g. 127.0.0.1") from None
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(
                f"engine.url={url}: port {port} on {host} is already in use (another server?): stop it, or serve on "
                f"another port, e.g. engine.url=http://{host}:{port + 1}/v1 (and pass the same engine.url to the job)"
            ) from None
        raise ConfigError(
            f"engine.url={url}: cannot listen on {host}:{port} ({exc.strerror}); jobs/serve.py serves on this "
            "machine: use one of its addresses, e.g. engine.url=http://127.0.0.1:8000/v1 (0.0.0.0 for all)"
        ) from None


def prepare_model(job: JobConfig) -> None:
    """What the offline job checks before its engine: the embedded model built, the method's preflight checks."""
    if job.model.embedded is not None:
        try:
            ensure_embedded(job.model.embedded, job.model.path)
        except EmbeddedAssetError as exc:
            raise ConfigError(str(exc)) from None
    preflight(job)


def _tail(path: Path, lines: int = TAIL_LINES) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(cannot read {path}: {exc})"


def _group_members(pgid: int) -> list[psutil.Process]:
    """Live processes of the process group (zombies are dead already and only wait for their parent)."""
    members = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == pgid and process.status() != psutil.STATUS_ZOMBIE:
                members.append(process)
        except (OSError, psutil.Error):
            continue
    return members


class VllmServer:
    """A running vLLM OpenAI server started for a job; a context manager that stops it on exit."""

    def __init__(self, process: subprocess.Popen[bytes], url: str, log_path: Path, reaper: Reaper | None) -> None:
        self.process = process
        # The OpenAI API base (engine.url, ending in /v1); the server's root serves /health and /metrics.
        self.url = url.rstrip("/")
        self.root = self.url.removesuffix("/v1")
        self.log_path = log_path
        self._reaper = reaper
        self._stopped = False

    @property
    def pid(self) -> int:
        return self.process.pid

    @classmethod
    def start(cls, job: JobConfig, *, timeout: float = 300.0, log_dir: Path | None = None) -> VllmServer:
        """Check the address and the model, launch the server, and return once ``/health`` answers 200.

        Raises:
            ConfigError: engine.url cannot be served here (busy port, foreign host, https, not /v1) or the model
                fails the offline job's checks; nothing was launched.
            ServerStartError: the server exited, or was not healthy within ``timeout`` seconds (it is stopped).
        """
        check_port_free(job)
        prepare_model(job)
        argv = vllm_serve_argv(job, module=vllm_console_script_broken())
        host, port = listen_address(job)
        log_dir = Path(job.output_root) / "_serve" if log_dir is None else log_dir
        log_dir.mkdir(parents=True, exist_ok=True)
        log_path = log_dir / f"vllm-{host}-{port}-{time.strftime('%Y%m%d-%H%M%S')}.log"
        log.info("starting vLLM's server (log: %s): %s", log_path, " ".join(argv))
        # Before the server: a kill of this process during the start-up would leave it running too.
        reaper = Reaper.start()
        try:
            with log_path.open("ab") as out:
                process = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=server_process_environment(job),
                    start_new_session=True,
                )
        except BaseException:
            if reaper:
                reaper.stop()
            raise
        server = cls(process, job.engine.url, log_path, reaper)
        try:
            server.wait_healthy(timeout)
        except BaseException:
            server.stop()
            raise
        return server

    def wait_healthy(self, timeout: float) -> None:
        began = time.monotonic()
        # trust_env off: a proxy from the environment must not stand between us and our own child.
        with httpx.Client(timeout=5.0, trust_env=False) as client:
            while True:
                if self.process.poll() is not None:
                    raise ServerStartError(
                        f"vLLM's server exited with code {self.process.returncode} while starting; the end of "
                        f"{self.log_path}:\n{_tail(self.log_path)}"
                    )
                try:
                    if client.get(f"{self.root}/health").status_code == 200:
                        log.info("vLLM's server is healthy after %.0f s", time.monotonic() - began)
                        return
                except httpx.TransportError:
                    pass  # not listening yet
                if time.monotonic() - began > timeout:
                    raise ServerStartError(
                        f"vLLM's server did not answer {self.root}/health within {timeout:.0f} s; the end of "
                        f"{self.log_path}:\n{_tail(self.log_path)}"
                    )
                time.sleep(POLL_SECONDS)

    def serve_until_signalled(self) -> int:
        """Block until SIGTERM or SIGINT (Ctrl-C), then stop the server and return 0; if the server exits by itself
        first, log the end of its log and return its exit code (1 if it was 0)."""
        stop = threading.Event()
        handlers = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            while not stop.is_set():
                if self.process.poll() is not None:
                    log.error(
                        "vLLM's server exited by itself with code %s; the end of %s:\n%s",
                        self.process.returncode,
                        self.log_path,
                        _tail(self.log_path),
                    )
                    return self.process.returncode or 1
                stop.wait(POLL_SECONDS)
            log.info("stopping vLLM's server")
            return 0
        finally:
            self.stop()
            for sig, handler in handlers.items():
                signal.signal(sig, handler)

    def stop(self, grace: float = GRACE_SECONDS) -> None:
        """End the server's whole process group. Idempotent.

        SIGTERM goes to the API process first: vLLM's own shutdown then ends its engine processes in order (a
        SIGTERM to all of them at once leaves workers whose parent died first). What is left of the group once the
        API process is gone gets SIGTERM too, and the whole group SIGKILL after ``grace`` seconds.
        """
        if self._stopped:
            return
        self._stopped = True
        group = self.process.pid  # the leader of its own session, hence of its group
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGTERM)
        if not self._wait_group_gone(grace, terminate_leftovers=True):
            log.warning("vLLM's server did not stop within %.0f s of SIGTERM: killing its process group", grace)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)
            self._wait_group_gone(5.0, terminate_leftovers=False)
        self.process.wait()
        # Only once the group is gone: otherwise the reaper still ends what is left when this process exits.
        if self._reaper and not _group_members(group):
            self._reaper.stop()
        log.info("vLLM's server stopped (exit code %s)", self.process.returncode)

    def kill(self) -> None:
        """SIGKILL to the whole group at once, as a crash or a node loss would (tests use it), then clear what such a
        death leaves: the /dev/shm files the group held, which vLLM's own clean-up never gets to remove."""
        if self._stopped:
            return
        self._stopped = True
        group = self.process.pid
        # Frozen first, at once: reading a busy process's memory maps can take seconds, and a server that keeps
        # answering meanwhile is not the crash at this moment that the caller asked for.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGSTOP)
        held: set[str] = set()
        for member in _group_members(group):
            with contextlib.suppress(psutil.Error):
                held |= shm_used_by(member, maps=True)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
        self._wait_group_gone(10.0, terminate_leftovers=False)
        self.process.wait()
        for path in sorted(held):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        if self._reaper:
            self._reaper.stop()
        log.info("vLLM's server killed (%d shared-memory files removed)", len(held))

    def _wait_group_gone(self, wait: float, *, terminate_leftovers: bool) -> bool:
        """True once no process of the server's group is left, within ``wait`` seconds."""
        group = self.process.pid
        deadline = time.monotonic() + wait
        while True:
            leader_done = self.process.poll() is not None  # also reaps it, or it would stay in the group as a zombie
            if not _group_members(group):
                return True
            if leader_done and terminate_leftovers:
                terminate_leftovers = False
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(group, signal.SIGTERM)
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)

    def __enter__(self) -> VllmServer:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()
