"""What a Ray launch refuses before the run folder is written, each in one line and within seconds: an address of no
Ray form, a cluster that does not answer (ray.address, RAY_ADDRESS, auto, ray://), and a replica the job's local Ray
could never place (specbatch.cluster.ray_checks). No Ray is started: the probes meet closed ports."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest import compose_job

from specbatch.cluster.ray_checks import replicas_that_fit
from specbatch.config import ConfigError, JobConfig
from specbatch.pipeline import run_job

# A refusal within this many seconds: the probe's own bound (5 s) and the import of Ray's client library.
SAY_WITHIN = 10.0


def _ray_job(tmp_path: Path, *extra: str) -> JobConfig:
    return compose_job([f"output_root={tmp_path}", "launcher=ray", "engine.backend=dummy", "tracking=off", *extra])


def _refused(job: JobConfig, tmp_path: Path) -> str:
    """The one line run_job refuses ``job`` with, said within SAY_WITHIN and before the run folder exists."""
    began = time.monotonic()
    with pytest.raises(ConfigError) as refused:
        run_job(job)
    assert time.monotonic() - began < SAY_WITHIN
    assert not (tmp_path / "runs").exists()
    said = str(refused.value)
    assert "\n" not in said
    return said


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port on loopback that accepts connections and never answers: a host that is there but is no Ray cluster
    (a proxy, another server, a firewall that accepts), where Ray would retry for ever or fail a minute later."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError, OSError):
                accepted.append(server.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(timeout=5)
        for connection in accepted:
            connection.close()
        server.close()


@pytest.mark.parametrize("address", ["127.0.0.1:1", "ray://127.0.0.1:1", "silent"])
def test_a_cluster_that_does_not_answer_is_refused_before_the_run_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, silent_port: int, address: str
) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    if address == "silent":
        address = f"127.0.0.1:{silent_port}"
    said = _refused(_ray_job(tmp_path, f"ray.address={address}"), tmp_path)
    assert said.startswith("no Ray cluster answers at ") and f"ray.address={address}" in said, said


def test_ray_address_from_the_environment_is_probed_and_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    said = _refused(_ray_job(tmp_path), tmp_path)
    assert said.startswith("no Ray cluster answers at ") and "RAY_ADDRESS=127.0.0.1:1" in said, said
    monkeypatch.setenv("RAY_ADDRESS", "nonsense")
    assert "RAY_ADDRESS='nonsense' is not a Ray address" in _refused(_ray_job(tmp_path), tmp_path)


@pytest.mark.parametrize("address", ["nonsense", "host:0", "http://host:6379", "host:99999"])
def test_an_address_of_no_ray_form_is_refused_by_the_config(address: str) -> None:
    with pytest.raises(ConfigError, match=f"ray.address='{address}' (is not a Ray address|has no valid port)"):
        compose_job(["launcher=ray", f"ray.address={address}"])


def test_auto_without_a_cluster_on_this_machine_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ray._private.services as services

    # As Ray finds "auto" (its bootstrap address file, then the raylets running here): none, on this machine now.
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(services, "find_bootstrap_address", lambda temp_dir: None)
    monkeypatch.setattr(services, "find_gcs_addresses", lambda: set())
    said = _refused(_ray_job(tmp_path, "ray.address=auto"), tmp_path)
    assert "ray.address=auto but no Ray cluster runs on this machine" in said, said


def test_a_replica_larger_than_the_local_ray_is_refused_and_extra_replicas_are_not_started() -> None:
    job = compose_job(["launcher=ray", "ray.replicas=50", "ray.cpus_per_replica=1"])
    assert job.ray is not None
    assert replicas_that_fit(job.ray, 0.0, {"CPU": 2.0}) == 2
    assert replicas_that_fit(job.ray, 1.0, {"CPU": 8.0, "GPU": 3.0}) == 3
    with pytest.raises(ConfigError, match=r"a replica reserves 1 GPU.*the local Ray sees 0.*ray.gpus_per_replica=0"):
        replicas_that_fit(job.ray, 1.0, {"CPU": 8.0})
    big = compose_job(["launcher=ray", "ray.cpus_per_replica=64"]).ray
    assert big is not None
    with pytest.raises(ConfigError, match=r"ray.cpus_per_replica=64 is more than the 2 CPUs .*=2 or less"):
        replicas_that_fit(big, 0.0, {"CPU": 2.0})
