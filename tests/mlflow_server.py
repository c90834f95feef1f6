"""A real ``mlflow server`` for tests: sqlite backend, artifacts proxied over HTTP, on a free local port.

    with start_mlflow_server(tmp_path) as server:
        run_generate([..., f"tracking.uri={server.uri}"])
        MlflowClient(server.uri).search_runs(...)
        server.kill()  # a test may take the server down mid-run; teardown copes

``conftest.py`` wraps this as the function-scoped ``mlflow_server`` fixture; a module that wants one server for
all its tests builds its own module-scoped fixture from ``start_mlflow_server``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

MLFLOW = Path(sys.executable).with_name("mlflow")
HOST = "127.0.0.1"


def free_port() -> int:
    """A port nothing listens on right now (the OS picks it; a tiny race with other processes remains)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def server_command(workdir: Path, port: int) -> list[str]:
    """The command line: the documented self-hosting set-up (sqlite store, artifacts served by the server)."""
    return [
        str(MLFLOW),
        "server",
        "--backend-store-uri",
        f"sqlite:///{workdir / 'mlflow.db'}",
        # With --serve-artifacts new experiments get mlflow-artifacts:/ locations, so clients upload through the
        # server over HTTP instead of writing into a folder that only exists on the server's machine.
        "--serve-artifacts",
        "--artifacts-destination",
        str(workdir / "artifacts"),
        "--host",
        HOST,
        "--port",
        str(port),
        # The default is 4 uvicorn workers; on a 2-core test machine one is plenty and starts faster.
        "--workers",
        "1",
    ]


@dataclass
class MlflowServer:
    """One running ``mlflow server``; ``uri`` is what ``tracking.uri`` and ``MlflowClient`` take."""

    uri: str
    process: subprocess.Popen[bytes]
    workdir: Path

    @property
    def stderr_path(self) -> Path:
        return self.workdir / "server.stderr"

    def stderr_tail(self, chars: int = 3000) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")[-chars:]
        except FileNotFoundError:
            return "(no stderr file)"

    def alive(self) -> bool:
        return self.process.poll() is None

    def _signal_group(self, sig: signal.Signals) -> None:
        # The server is a launcher with uvicorn (and, if enabled, job runners) below it; it was started in its own
        # session, so its process group holds exactly the processes this helper started.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, sig)

    def kill(self) -> None:
        """SIGKILL the whole server at once, as a crash or an OOM kill would: no graceful shutdown."""
        self._signal_group(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self, timeout: float = 20) -> None:
        """SIGTERM and wait; SIGKILL what is left after ``timeout`` seconds. Safe to call after ``kill``."""
        if self.alive():
            self._signal_group(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                log.warning("mlflow server %s ignored SIGTERM for %ss; killing it", self.uri, timeout)
        # Children may outlive a launcher that exited on SIGTERM; sweep the group either way.
        self._signal_group(signal.SIGKILL)
        self.process.wait(timeout=30)

    def wait_healthy(self, timeout: float) -> None:
        """Poll ``GET /health`` until it answers OK; fail with the server's stderr tail if it dies or times out."""
        deadline = time.monotonic() + timeout
        last_error = "no answer yet"
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(
                    f"mlflow server exited with code {self.process.returncode} before answering {self.uri}/health;"
                    f" stderr tail:\n{self.stderr_tail()}"
                )
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as response:
                    if response.status == 200:
                        return
                    last_error = f"HTTP {response.status}"
            except (urllib.error.URLError, ConnectionError, TimeoutError) as error:
                last_error = str(error)
            time.sleep(0.25)
        raise TimeoutError(
            f"mlflow server at {self.uri} did not answer /health within {timeout:.0f}s (last: {last_error});"
            f" command: {' '.join(self.process.args)}; stderr tail:\n{self.stderr_tail()}"
        )


@contextlib.contextmanager
def start_mlflow_server(workdir: Path, timeout: float = 120) -> Iterator[MlflowServer]:
    """Start a server with its store and artifacts in ``workdir``, wait for /health, stop it on exit.

    Args:
        workdir: holds ``mlflow.db``, ``artifacts/`` and the server's stdout/stderr logs.
        timeout: seconds to wait for /health (start-up takes ~10 s on an idle 2-core machine, more under load).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    # Job execution (GenAI judges, scheduled jobs) starts half a dozen huey consumers this test has no use for;
    # they would only compete for the CPU with the vLLM engine.
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    with open(workdir / "server.stdout", "wb") as stdout, open(workdir / "server.stderr", "wb") as stderr:
        process = subprocess.Popen(
            server_command(workdir, port),
            cwd=workdir,
            env=env,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
        )
    server = MlflowServer(uri=f"http://{HOST}:{port}", process=process, workdir=workdir)
    try:
        server.wait_healthy(timeout)
        log.info("mlflow server up at %s (store and artifacts in %s)", server.uri, workdir)
        yield server
    finally:
        server.stop()


@dataclass
class AuthProxy:
    """What ``basic_auth_proxy`` saw: requests it passed on and requests it refused (wrong or no credentials)."""

    uri: str
    passed: int = 0
    refused: int = 0


@contextlib.contextmanager
def basic_auth_proxy(target: str, user: str, password: str, port: int | None = None) -> Iterator[AuthProxy]:
    """A server that needs HTTP basic auth, in front of ``target`` (a real ``mlflow server`` without auth).

    MLflow's own basic-auth app needs extra packages; this checks the credentials the way it does (the
    Authorization header) and forwards every allowed request unchanged, so a client is proven to send them.
    """
    import base64
    import http.client
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from urllib.parse import urlsplit

    expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    upstream = urlsplit(target)
    proxy = AuthProxy(uri="")

    class Handler(BaseHTTPRequestHandler):
        def _forward(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.headers.get("Authorization") != expected:
                proxy.refused += 1
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="mlflow"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            proxy.passed += 1
            conn = http.client.HTTPConnection(upstream.hostname, upstream.port, timeout=60)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
            conn.request(self.command, self.path, body=body, headers=headers)
            response = conn.getresponse()
            data = response.read()
            conn.close()
            self.send_response(response.status)
            for key, value in response.getheaders():
                if key.lower() not in ("transfer-encoding", "connection", "content-length", "date", "server"):
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _forward

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
            log.debug("auth proxy: " + format, *args)

    server = ThreadingHTTPServer((HOST, port or free_port()), Handler)
    proxy.uri = f"http://{HOST}:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
