"""What a Ray launch (``launcher=ray``) refuses, each in one line naming the key and the way out.

Before the run folder is written (the executor's ``check``, specbatch.run.executor): a job spec=auto cannot run on
Ray, and a cluster that does not answer at the address the job would connect to (``ray.address``, else
``RAY_ADDRESS``; ``auto`` found the way Ray finds it). Ray itself would retry an unreachable GCS for as long as one
waits, with only its C++ warnings, or fail a minute later with an unrelated message. Once Ray is up: a replica the
job's own local Ray can never place (more CPUs or GPUs than the machine has), and on a cluster a replica no node
makes room for within ``ray.placement_timeout_seconds`` (Ray Data would wait for ever after one warning).

Ray is imported inside the functions: the spec=auto check runs on every launch, and jobs/ray_job.py needs no Ray.
"""

from __future__ import annotations

import logging
import math
import os
import socket
from typing import Any

from specbatch.config import ConfigError, JobConfig, RayConfig
from specbatch.config.ray_launch import address_form_problem
from specbatch.methods import SpecMethod

log = logging.getLogger(__name__)

# Seconds a cluster's GCS (or Ray Client server) has to accept a TCP connection: a live one does in milliseconds.
PROBE_SECONDS = 5.0


def check_runs_on_ray(job: JobConfig) -> None:
    """The jobs launcher=ray cannot run, refused before anything starts (jobs/generate.py and jobs/ray_job.py)."""
    if job.ray is not None and job.spec.method is SpecMethod.auto:
        raise ConfigError(
            "spec=auto measures its candidates on one engine and switches it: it does not run on Ray yet; run "
            "it without launcher=ray, then run its winner (jobs/compare.py names it) with launcher=ray"
        )


def job_address(cfg: RayConfig) -> tuple[str | None, str]:
    """The address the job connects to (None: a local Ray it starts), and the key that names it."""
    env = os.environ.get("RAY_ADDRESS") or None
    if cfg.address in (None, "local"):
        return (env, "RAY_ADDRESS") if cfg.address is None and env else (None, "ray.address")
    if cfg.address == "auto" and env:
        # As ray.init does: RAY_ADDRESS names the cluster that "auto" stands for.
        return env, "RAY_ADDRESS"
    return cfg.address, "ray.address"


def check_cluster_answers(cfg: RayConfig) -> None:
    """A ConfigError unless a Ray cluster (or Ray Client server) accepts a connection where the job would connect;
    nothing to check for a local Ray the job starts."""
    address, key = job_address(cfg)
    if address is None or address == "local":
        return
    problem = address_form_problem(address, key)
    if problem is not None:
        raise ConfigError(f"{problem} (or unset {key} for a local Ray)" if key == "RAY_ADDRESS" else problem)
    host, port, where = _host_port(address, key)
    why = _probe_client(host, port) if address.startswith("ray://") else _probe_gcs(host, port)
    if why is not None:
        raise ConfigError(
            f"no Ray cluster answers at {host}:{port} ({key}={address}{where}: {why}, asked for {PROBE_SECONDS:g} s): "
            f"start it (`ray start --head` on its head) or fix {key}"
            + (", or drop it for a local Ray the job starts" if key == "ray.address" else "")
        )


def _probe_gcs(host: str, port: int) -> str | None:
    """Why no Ray GCS answers at host:port (None: one does), asked with the first call Ray's own client makes: a
    port that only accepts connections (a proxy, another server) is not a cluster, and Ray would retry it for ever."""
    import grpc
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
        # A TLS cluster wants the job's certificates: the connection alone is checked, ray.init does the rest.
        return _probe_client(host, port)
    channel = grpc.insecure_channel(f"{host}:{port}")
    try:
        stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
        stub.GetClusterId(gcs_service_pb2.GetClusterIdRequest(), timeout=PROBE_SECONDS)
    except grpc.RpcError as exc:
        # A cluster with token authentication refuses a call without its token: it answers all the same.
        if exc.code() in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
            return None
        return f"{exc.code().name}: {(exc.details() or '').splitlines()[0][:200]}"
    finally:
        channel.close()
    return None


def _probe_client(host: str, port: int) -> str | None:
    """Why nothing accepts a connection at host:port (None: something does): the Ray Client server's check."""
    try:
        with socket.create_connection((host, port), timeout=PROBE_SECONDS):
            return None
    except OSError as exc:
        return "no answer" if isinstance(exc, TimeoutError) else (exc.strerror or type(exc).__name__)


def _host_port(address: str, key: str) -> tuple[str, int, str]:
    """Where the GCS (or the Ray Client server, for ray://) listens, as Ray resolves it, and where that came from."""
    import ray._private.services as services

    where = ""
    if address == "auto":
        try:
            address = services.get_ray_address_from_environment("auto", None)
        except ConnectionError:
            raise ConfigError(
                f"{key}=auto but no Ray cluster runs on this machine (`ray start --head` starts one): start it, "
                "name another with host:6379, or drop ray.address for a local Ray the job starts"
            ) from None
        where = f", found as {address}"
    host, _, port = address.removeprefix("ray://").rpartition(":")
    host = host.strip("[]")
    # Ray replaces a loopback host by the machine's outward address, where its GCS listens.
    return services.resolve_ip_for_localhost(host), int(port), where


def replicas_that_fit(cfg: RayConfig, gpus: float, resources: dict[str, Any]) -> int:
    """How many replicas a local Ray of ``resources`` (ray.cluster_resources()) holds at once; a ConfigError when
    not even one fits: its raylet is the only node, nothing will ever make room."""
    have_cpus, have_gpus = float(resources.get("CPU", 0)), float(resources.get("GPU", 0))
    if cfg.cpus_per_replica > have_cpus:
        raise ConfigError(
            f"ray.cpus_per_replica={cfg.cpus_per_replica:g} is more than the {have_cpus:g} CPUs of the local Ray "
            f"(this machine): no replica could ever start; set ray.cpus_per_replica={max(have_cpus, 1):g} or less, "
            "or run on a cluster (ray.address)"
        )
    if gpus > have_gpus:
        raise ConfigError(
            f"a replica reserves {gpus:g} GPU(s) (ray.gpus_per_replica, or model.tensor_parallel_size on engine=gpu) "
            f"but the local Ray sees {have_gpus:g}: no replica could ever start; set ray.gpus_per_replica="
            f"{have_gpus:g} (0: none), or run on a cluster with GPUs (ray.address)"
        )
    fit = math.floor(have_cpus / cfg.cpus_per_replica + 1e-9)
    if gpus > 0:
        fit = min(fit, math.floor(have_gpus / gpus + 1e-9))
    return min(cfg.replicas, fit)


def wait_for_room(cfg: RayConfig, gpus: float) -> None:
    """On a cluster: wait (at most ray.placement_timeout_seconds) until a node has room for one replica, by placing
    and removing a placement group of one replica's bundle; Ray Data would wait for ever after one warning."""
    from ray.util.placement_group import placement_group, remove_placement_group

    bundle = {"CPU": cfg.cpus_per_replica, **({"GPU": gpus} if gpus > 0 else {})}
    group = placement_group([bundle])
    try:
        placed = group.wait(timeout_seconds=cfg.placement_timeout_seconds)
    finally:
        remove_placement_group(group)
    if not placed:
        raise ConfigError(
            f"no node of the Ray cluster had room for one replica ({bundle}: ray.cpus_per_replica, "
            f"ray.gpus_per_replica) within ray.placement_timeout_seconds={cfg.placement_timeout_seconds:g}: lower "
            "what a replica reserves, add nodes that have it, or raise ray.placement_timeout_seconds"
        )
