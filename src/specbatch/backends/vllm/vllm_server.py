"""vLLM's OpenAI server for a job, as a child process: started, waited for until healthy, and stopped with its group.

The server runs ``vllm_serve_argv(job)`` (every ``llm_kwargs`` argument of the offline job as a flag) with the
environment the offline engine sets (``vllm_environment``), so what it serves is what the job measures.

Processes, stopping and the kill-safety of the child are :class:`specbatch.serving.child_server.ChildServer`'s.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import time
from collections.abc import Mapping
from pathlib import Path

from specbatch.assets.cache import EmbeddedAssetError
from specbatch.assets.prepare import ensure_embedded
from specbatch.backends.vllm import vllm_options
from specbatch.backends.vllm.methods import check_method
from specbatch.backends.vllm.serve_commands import (
    VLLM_API_KEY,
    listen_address,
    vllm_console_script_broken,
    vllm_serve_argv,
)
from specbatch.backends.vllm.vllm_args import ipc_path_chosen_by_user, vllm_environment
from specbatch.config import ConfigError, JobConfig
from specbatch.config.preflight import preflight
from specbatch.serving.child_server import ChildServer
from specbatch.serving.reaper import make_ipc_dir

log = logging.getLogger(__name__)


def server_process_environment(job: JobConfig, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The server's environment: ``environ`` (default os.environ) over ``vllm_environment(job)`` (so an explicit
    value wins, as in the offline engine), and the API key of ``engine.api_key_env`` as ``VLLM_API_KEY``, which
    vLLM reads, so the key never appears in an argv. The server takes the key the job sends, or none."""
    environ = os.environ if environ is None else environ
    env = {**vllm_environment(job), **environ}
    env.pop(VLLM_API_KEY, None)
    key_env = vllm_options(job).api_key_env
    key = environ.get(key_env)
    if key:
        env[VLLM_API_KEY] = key
    elif environ.get(VLLM_API_KEY):
        log.warning(
            "%s is set but %s (engine.api_key_env) is not: the server starts without a key, since the job would "
            "send none; export %s to require one",
            VLLM_API_KEY,
            key_env,
            key_env,
        )
    return env


def check_port_free(job: JobConfig) -> None:
    """Refuse, naming engine.url, a port something already listens on or a host that is not this machine's."""
    host, port = listen_address(job)
    url = vllm_options(job).url
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
    check_method(job)
    preflight(job)


class VllmServer(ChildServer):
    """A running vLLM OpenAI server started for a job; a context manager that stops it on exit."""

    label = "vLLM's server"

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
        env = server_process_environment(job)
        # vLLM's server and engine talk over unix sockets named by UUID in VLLM_RPC_BASE_PATH (default /tmp), and its
        # workers meet through a file in the temp folder: nothing removes either. The server gets a folder of its own
        # for both (its TMPDIR), removed when it stops (or by the reaper).
        ipc_dir = make_ipc_dir()
        env["TMPDIR"] = str(ipc_dir)
        if not ipc_path_chosen_by_user():
            env["VLLM_RPC_BASE_PATH"] = str(ipc_dir)
        return cls.launch(argv, env, vllm_options(job).url, log_path, timeout=timeout, ipc_dir=ipc_dir)
