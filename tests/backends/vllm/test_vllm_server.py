"""The server's life: refused before launch when engine.url cannot be served, healthy or failing fast with its log,
its whole process group ended on stop (SIGKILL if it ignores SIGTERM) or when its parent is killed. The real thing,
jobs/serve.py serving SmolLM2 + n-gram, answering Dynamo's chat request and stopped by SIGTERM, is checked in
tests/backends/server/test_server_backend_cpu.py, on the vLLM server that module starts again through jobs/serve.py."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import httpx
import psutil
import pytest

from conftest import PROJECT_ROOT, compose_job, wait_group_gone
from specbatch.backends.vllm import vllm_server
from specbatch.backends.vllm.vllm_server import VllmServer
from specbatch.config import ConfigError
from specbatch.serving import child_server, reaper
from specbatch.serving.child_server import ServerStartError

# A stand-in for vLLM's server: answers /health, and starts a child in its group as vLLM's engine process does.
# argv: port, "ignore" to ignore SIGTERM (it and its child), "fail" to exit at once, "crash" to die 2 s after it
# started, its child first, leaving the /dev/shm file the child made (as vLLM's engine leaves its ring buffers).
FAKE_SERVER = textwrap.dedent(
    """
    import http.server, os, signal, subprocess, sys, threading, time
    port, mode = int(sys.argv[1]), sys.argv[2]
    if mode == "fail":
        print("fake server: cannot load the model", flush=True)
        sys.exit(3)
    if mode == "ignore":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = "import signal, sys, time\\nif sys.argv[1] == 'ignore': signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n"
    child += f"held = open('/dev/shm/specbatch-test-crash-{port}', 'w')\\n" if mode == "crash" else ""
    engine = subprocess.Popen([sys.executable, "-c", child + "time.sleep(600)", mode])

    def crash():
        time.sleep(2)
        engine.kill()
        os._exit(1)

    if mode == "crash":
        threading.Thread(target=crash, daemon=True).start()

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

    http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
    """
)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def group_alive(group: int) -> list[psutil.Process]:
    return child_server._group_members(group)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """Start the fake server instead of vLLM's for a job on a free port; returns (job, start)."""
    port = free_port()
    job = compose_job([f"engine.url=http://127.0.0.1:{port}/v1", f"output_root={tmp_path}"])

    def start(mode: str = "serve", **kwargs: float) -> VllmServer:
        argv = [sys.executable, "-c", FAKE_SERVER, str(port), mode]
        monkeypatch.setattr(vllm_server, "vllm_serve_argv", lambda job, module: argv)
        return VllmServer.start(job, **kwargs)

    return job, start


def test_a_busy_port_is_refused_naming_engine_url_before_anything_starts(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        url = f"http://127.0.0.1:{taken.getsockname()[1]}/v1"
        before = psutil.Process().children(recursive=True)
        with pytest.raises(ConfigError, match=f"engine.url={url}: port .* is already in use"):
            VllmServer.start(compose_job([f"engine.url={url}", f"output_root={tmp_path}"]))
        assert psutil.Process().children(recursive=True) == before
        assert not (tmp_path / "_serve").exists()


def test_a_server_program_that_cannot_run_leaves_no_reaper_and_no_ipc_folder(tmp_path: Path) -> None:
    # The reaper starts before the server; when the server's program cannot even be started, both go again.
    ipc_dir = reaper.make_ipc_dir()
    before = psutil.Process().children(recursive=True)
    with pytest.raises(FileNotFoundError):
        child_server.ChildServer.launch(
            [str(tmp_path / "no-such-server")],
            dict(os.environ),
            "http://127.0.0.1:9/v1",
            tmp_path / "server.log",
            timeout=5,
            ipc_dir=ipc_dir,
        )
    assert not ipc_dir.exists()
    assert [p for p in psutil.Process().children(recursive=True) if p not in before and p.is_running()] == []


def test_a_host_of_another_machine_is_refused(tmp_path: Path) -> None:
    # 192.0.2.0/24 is reserved for documentation: never an address of this machine.
    with pytest.raises(ConfigError, match="engine.url=http://192.0.2.1:8000/v1: cannot listen"):
        VllmServer.start(compose_job(["engine.url=http://192.0.2.1:8000/v1", f"output_root={tmp_path}"]))


def test_start_waits_for_health_and_stop_ends_the_whole_group(fake) -> None:
    _, start = fake
    with start() as server:
        group = os.getpgid(server.pid)
        assert group == server.pid != os.getpgid(0)  # its own group, out of reach of a terminal's Ctrl-C
        assert httpx.get(f"{server.root}/health", trust_env=False).status_code == 200
        assert server.url.endswith("/v1") and server.log_path.is_file()
        deadline = time.monotonic() + 10
        while len(group_alive(group)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(group_alive(group)) == 2  # the server and its "engine" child
    assert group_alive(group) == []
    server.stop()  # idempotent


def test_the_servers_ipc_sockets_go_to_a_folder_of_its_own_removed_when_it_stops(
    fake, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # vLLM's server and engine talk over sockets named by UUID in VLLM_RPC_BASE_PATH (default /tmp), never removed.
    _, start = fake
    monkeypatch.delenv("VLLM_RPC_BASE_PATH", raising=False)
    for ending in ("stop", "kill"):
        server = start()
        environ = psutil.Process(server.pid).environ()
        ipc = Path(environ["VLLM_RPC_BASE_PATH"])
        assert ipc.name.startswith(reaper.IPC_PREFIX) and ipc.parent == Path(tempfile.gettempdir()) and ipc.is_dir()
        # Its workers' rendezvous file (vllm_dist_<hex>, in the temp folder) goes there too.
        assert environ["TMPDIR"] == str(ipc)
        server.stop() if ending == "stop" else server.kill()
        assert not ipc.exists(), ending
    # A folder the user chose is theirs: used, and kept; the server's temp files still go to a folder of its own.
    monkeypatch.setenv("VLLM_RPC_BASE_PATH", str(tmp_path))
    with start() as server:
        environ = psutil.Process(server.pid).environ()
        assert environ["VLLM_RPC_BASE_PATH"] == str(tmp_path)
        own = Path(environ["TMPDIR"])
        assert own.name.startswith(reaper.IPC_PREFIX) and own.is_dir()
    assert tmp_path.is_dir() and not own.exists()


def test_a_server_that_crashed_leaves_nothing_in_dev_shm(fake) -> None:
    # A vLLM server that crashed left ~400 MB of its engine's ring buffers in /dev/shm: stop() has the reaper clear
    # what the dead group made.
    job, start = fake
    port = job.engine.url.split(":")[-1].split("/")[0]
    left = Path(f"/dev/shm/specbatch-test-crash-{port}")
    try:
        server = start("crash")
        deadline = time.monotonic() + 30
        while server.process.poll() is None:
            assert time.monotonic() < deadline, "the fake server did not crash"
            time.sleep(0.1)
        assert left.exists(), "the crashed engine stand-in left its file"
        server.stop()
        assert not left.exists()
    finally:
        left.unlink(missing_ok=True)


def test_a_server_ignoring_sigterm_is_killed_after_the_grace_period(fake) -> None:
    _, start = fake
    server = start("ignore")
    group = server.pid
    began = time.monotonic()
    server.stop(grace=1.0)
    assert group_alive(group) == []
    assert 1.0 <= time.monotonic() - began < 10


def test_a_server_that_exits_fails_fast_with_the_end_of_its_log(fake) -> None:
    _, start = fake
    began = time.monotonic()
    with pytest.raises(ServerStartError, match="exited with code 3 while starting") as caught:
        start("fail")
    assert "fake server: cannot load the model" in str(caught.value)
    assert time.monotonic() - began < 30


def test_a_server_that_never_gets_healthy_times_out_and_is_stopped(fake, monkeypatch: pytest.MonkeyPatch) -> None:
    job, _ = fake
    argv = [sys.executable, "-c", "import time; print('loading', flush=True); time.sleep(600)"]
    monkeypatch.setattr(vllm_server, "vllm_serve_argv", lambda job, module: argv)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(ServerStartError, match=r"did not answer .*/health within 2 s[\s\S]*loading"):
        VllmServer.start(job, timeout=2.0)
    time.sleep(0.5)
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before


def test_the_server_dies_with_a_parent_killed_outright(tmp_path: Path) -> None:
    """kill -9 of the process that started the server: the reaper ends the server's group anyway."""
    port = free_port()
    script = f"""
import sys
from hydra import compose, initialize_config_dir
from specbatch.config import register_configs, to_job_config
from specbatch.backends.vllm import vllm_server
from specbatch.serving import reaper
register_configs()
with initialize_config_dir(config_dir={str(PROJECT_ROOT / "conf")!r}, version_base="1.3"):
    job = to_job_config(compose("config", overrides=["engine.url=http://127.0.0.1:{port}/v1",
                                                     "output_root={tmp_path}"]))
argv = [sys.executable, "-c", {FAKE_SERVER!r}, "{port}", "serve"]
vllm_server.vllm_serve_argv = lambda job, module: argv
server = vllm_server.VllmServer.start(job)
print(server.pid, flush=True)
import time; time.sleep(600)
"""
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=PROJECT_ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        group = int(parent.stdout.readline())
        assert group_alive(group)
        # The reaper records the parent's descendants every POLL_SECONDS: a kill within that time of the launch is
        # the one moment it cannot cover (a real vLLM server takes tens of seconds to get healthy).
        time.sleep(3 * reaper.POLL_SECONDS)
    finally:
        parent.kill()
        parent.wait()
    left = wait_group_gone(group, timeout=15)
    if left:  # the test failed: do not leave the fake server behind
        os.killpg(group, signal.SIGKILL)
    assert left == []
