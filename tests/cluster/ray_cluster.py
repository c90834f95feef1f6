"""A real two-raylet Ray cluster on this machine for the Ray tests: ``ray start --head`` plus a second ``ray start
--address`` with its own resources, both with the venv's ray, torn down (every process of theirs) after.

Its own token (Ray 2.60 turns token authentication on for ``ray start --head``; the joining raylet and the drivers
read it from RAY_AUTH_TOKEN_PATH), its own temporary folder (short: Ray's socket paths must fit in 107 bytes) and its
own ports, so it meets no other Ray on the machine; teardown finds its processes by that token path (and their
children, whose titles Ray rewrites) rather than ``ray stop``, which would stop every Ray of the machine.

Not loopback only, although the issue asks it: Ray 2.60 replaces 127.0.0.1 by the address the machine routes
outward (ray._private.services.resolve_ip_for_localhost), and a network namespace of its own has no working loopback
on these machines (connect: "Network is unreachable"), so the cluster listens on the machine's private address.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

RAY = Path(sys.executable).parent / "ray"


@dataclass
class RayCluster:
    address: str
    # The environment a driver of this cluster runs with (RAY_ADDRESS and the token's path).
    env: dict[str, str]
    temp_dir: Path

    def processes(self) -> list[psutil.Process]:
        """Every live process of this cluster: those started with its token path, and their children."""
        token = self.env["RAY_AUTH_TOKEN_PATH"]
        found: dict[int, psutil.Process] = {}
        for proc in psutil.process_iter():
            try:
                if proc.environ().get("RAY_AUTH_TOKEN_PATH") == token:
                    found[proc.pid] = proc
                    found.update({child.pid: child for child in proc.children(recursive=True)})
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        return list(found.values())

    def replica_processes(self) -> list[psutil.Process]:
        """The engine replicas' actor processes (Ray titles them after the actor's class), and their engines' own
        (vLLM's engine core, which a replica starts)."""
        out = []
        for proc in self.processes():
            try:
                title = " ".join(proc.cmdline())
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                continue
            if "EngineReplica" in title or "EngineCore" in title:
                out.append(proc)
        return out

    def stop(self) -> None:
        procs = self.processes()
        for proc in procs:
            try:
                proc.terminate()
            except psutil.NoSuchProcess:
                pass
        _, alive = psutil.wait_procs(procs, timeout=15)
        for proc in alive:
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(alive, timeout=15)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_cluster(cpus_per_node: int = 2, bound: float = 120) -> RayCluster:
    temp = Path(tempfile.mkdtemp(prefix="sbr-", dir="/tmp"))
    token = temp / "token"
    token.write_text(secrets.token_hex(32))
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env |= {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token), "RAY_USAGE_STATS_ENABLED": "0"}
    cluster = RayCluster(f"127.0.0.1:{port}", {**env, "RAY_ADDRESS": f"127.0.0.1:{port}"}, temp)
    common = ["--disable-usage-stats", f"--num-cpus={cpus_per_node}"]
    try:
        head = [str(RAY), "start", "--head", f"--port={port}", f"--temp-dir={temp}", "--include-dashboard=false"]
        head += [f"--ray-client-server-port={_free_port()}", "--resources", json.dumps({"head_raylet": 1})]
        subprocess.run([*head, *common], env=env, check=True, capture_output=True, timeout=bound)
        second = [str(RAY), "start", f"--address={cluster.address}", "--resources", json.dumps({"second_raylet": 1})]
        subprocess.run([*second, *common], env=env, check=True, capture_output=True, timeout=bound)
        _wait_for_nodes(cluster, 2, bound)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _wait_for_nodes(cluster: RayCluster, nodes: int, bound: float) -> None:
    """Until the cluster says ``nodes`` raylets are alive (a joining raylet registers after `ray start` returns)."""
    probe = (
        "import ray, sys, time\n"
        "ray.init(logging_level='ERROR')\n"
        f"deadline = time.monotonic() + {bound}\n"
        f"while sum(n['Alive'] for n in ray.nodes()) < {nodes}:\n"
        "    assert time.monotonic() < deadline, ray.nodes()\n"
        "    time.sleep(0.5)\n"
    )
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", probe], env=cluster.env, check=True, capture_output=True, timeout=bound)
    assert time.monotonic() - started < bound
