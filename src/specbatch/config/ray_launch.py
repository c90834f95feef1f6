"""Where the job runs when Ray runs it (top-level ``ray``, set by ``launcher=ray``): the cluster and its replicas.

Null (the default): the job runs in its own process. Set, the shard's rows flow through Ray Data to ``replicas``
engine replicas (specbatch.cluster). Nothing here changes what is generated, so the section belongs to no identity:
a run started locally can be finished on Ray and the other way round, into the same run folder.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from specbatch.common.errors import require

# host:port (a name, an IPv4 address or a bracketed IPv6 one), optionally ray:// (Ray Client): the forms ray.init
# takes besides "auto" and "local"; anything else Ray only refuses with a traceback, or retries for ever.
_ADDRESS = re.compile(r"(ray://)?(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):([0-9]{1,5})")
ADDRESS_FORMS = (
    "host:6379 (the head's GCS), ray://host:10001 (Ray Client) or auto (the cluster `ray start` started on this "
    "machine)"
)


def address_form_problem(address: str, key: str) -> str | None:
    """Why ``address`` (the value of ``key``: ray.address or RAY_ADDRESS) is no address Ray connects to, or None."""
    if address in ("auto", "local"):
        return None
    found = _ADDRESS.fullmatch(address.strip())
    if found is None:
        return f"{key}={address!r} is not a Ray address: use {ADDRESS_FORMS}"
    if not 0 < int(found.group(3)) < 65536:
        return f"{key}={address!r} has no valid port (1-65535): use {ADDRESS_FORMS}"
    return None


@dataclass
class RayConfig:
    """The Ray cluster the job's rows go to, and what each engine replica reserves on it."""

    # null: the cluster RAY_ADDRESS names when it is set, else a local Ray the job starts and stops (ray.init());
    # "auto": the cluster `ray start` started on this machine; "host:6379" (its GCS) or "ray://host:10001" (Ray
    # Client) for another one.
    address: str | None = None
    # Engine replicas: Ray actors each holding one of the job's engines (Ray Data's map_batches concurrency).
    replicas: int = 1
    # What each replica reserves: its engine's CPUs, and its GPUs (null: model.tensor_parallel_size with engine=gpu,
    # one per vLLM worker; none elsewhere).
    cpus_per_replica: float = 1.0
    gpus_per_replica: float | None = None
    # A replica whose process dies is started again this many times (-1: always), and its chunk is asked again.
    max_restarts: int = 3
    # Environment variables of the replicas' processes (Ray's runtime_env), e.g. +ray.env.HF_HOME=/data/hf.
    env: dict[str, str] = field(default_factory=dict)
    # On a cluster: how long the job waits for room for one replica (its CPUs and GPUs free, or added by the
    # cluster's autoscaler) before it stops saying so, rather than wait for ever.
    placement_timeout_seconds: float = 600.0

    def __post_init__(self) -> None:
        require(
            self.address is None or bool(self.address.strip()),
            "ray.address is empty: drop it (a local Ray, or RAY_ADDRESS), or set ray.address=auto or host:6379",
        )
        problem = address_form_problem(self.address, "ray.address") if self.address is not None else None
        require(problem is None, f"{problem} (or drop ray.address for a local Ray)")
        require(
            self.placement_timeout_seconds > 0,
            f"ray.placement_timeout_seconds={self.placement_timeout_seconds} must be more than 0, e.g. 600",
        )
        require(self.replicas >= 1, f"ray.replicas={self.replicas} must be 1 or more, e.g. ray.replicas=2")
        require(
            self.cpus_per_replica > 0,
            f"ray.cpus_per_replica={self.cpus_per_replica} must be more than 0, e.g. ray.cpus_per_replica=1",
        )
        require(
            self.gpus_per_replica is None or self.gpus_per_replica >= 0,
            f"ray.gpus_per_replica={self.gpus_per_replica} must be 0 or more (or null: model.tensor_parallel_size "
            "on engine=gpu)",
        )
        require(
            self.max_restarts >= -1,
            f"ray.max_restarts={self.max_restarts} must be -1 (always) or more, e.g. ray.max_restarts=3",
        )

    def gpus(self, engine_name: str, tensor_parallel_size: int) -> float:
        """The GPUs each replica reserves: ray.gpus_per_replica, or one per vLLM worker on engine=gpu."""
        if self.gpus_per_replica is not None:
            return self.gpus_per_replica
        return float(tensor_parallel_size) if engine_name == "gpu" else 0.0
