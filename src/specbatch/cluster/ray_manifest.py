"""The job as a KubeRay ``RayJob``: the same ``python jobs/generate.py launcher=ray ...`` command, run on a Ray cluster
that KubeRay starts for it on Kubernetes and deletes when the job ends.

The fields follow the ``ray.io/v1`` RayJob CRD of KubeRay v1.5.2 (ray-operator/config/crd/bases/ray.io_rayjobs.yaml;
the ``required`` lists this manifest meets are the same from v1.4.2 to v1.7.0, and a copy of them is in
tests/fixtures/kuberay_rayjob_required.json). The cluster is shaped after the job's ``ray`` section: a head that runs
the driver and no replica, and one worker pod per engine replica, reserving what ``ray.cpus_per_replica`` and
``ray.gpus(...)`` say a replica reserves, so Ray places exactly one replica on each.

What the manifest leaves to whoever applies it: the image (it must hold this checkout, see jobs/ray_job.py), and
storage that outlives the pods for ``output_root`` (the driver writes the run folder on the head pod, which
KubeRay deletes ``ttlSecondsAfterFinished`` after the job ends) and for the model cache (``+ray.env.HF_HOME=...``).
"""

from __future__ import annotations

import logging
import math
import re
import shlex
from typing import Any

import yaml

from specbatch.config import ConfigError, JobConfig
from specbatch.config.overrides import parse_overrides, without_keys

log = logging.getLogger(__name__)

# KubeRay refuses a RayJob name that is not a DNS-1035 label (a lowercase letter first, then [a-z0-9-], no "-" at
# the end) or is longer than 47 characters (MaxRayJobNameLength in ray-operator/controllers/ray/utils/constant.go:
# the RayCluster it creates appends "-" and 5 characters, and its own limit is 53). Both are stricter than RFC 1123.
MAX_NAME_LENGTH = 47
_NAME = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
WORKER_GROUP = "engine-replicas"
# The head runs Ray's control processes and the job's driver (it reads the data set and writes every Parquet part),
# never a replica: a starting point, raise it in the printed manifest for a large data set.
HEAD_CPUS = "2"
HEAD_MEMORY = "8Gi"
# Ten minutes to read the cluster's logs (kubectl logs) after the job ends, before KubeRay deletes the cluster.
TTL_SECONDS_AFTER_FINISHED = 600


class _PlainDumper(yaml.SafeDumper):
    """A dumper writing a value met twice out twice: no ``&id001`` anchors for a reader of the manifest."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _shm_volumes() -> list[dict[str, Any]]:
    """A memory-backed /dev/shm: vLLM's tensor-parallel workers (NCCL) and Ray's object store use it, and a pod's
    default one is 64 MiB."""
    return [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]


def selects_launcher(overrides: list[str]) -> bool:
    """Whether the overrides choose a launcher themselves (``launcher=ray``, ``+launcher=ray``, ``~launcher``)."""
    return any(o.key_or_group == "launcher" for o in parse_overrides(overrides))


def with_ray_launcher(overrides: list[str]) -> list[str]:
    """The overrides with ``launcher=ray`` first, unless they already choose a launcher: the RayJob's command runs
    the job on Ray whatever the command line it was printed from said."""
    return list(overrides) if selects_launcher(overrides) else ["launcher=ray", *overrides]


def entrypoint_argv(overrides: list[str]) -> list[str]:
    """The job's command inside the RayJob: jobs/generate.py with ``launcher=ray`` and the overrides, less any
    ``ray.address``. Inside a RayJob the driver is a Ray job on the head, and Ray sets RAY_ADDRESS for it to the
    cluster KubeRay made (KubeRay sets it in every Ray container too); an address from the command line that printed
    the manifest names some other cluster, so it is dropped and ``ray.address`` stays null (RAY_ADDRESS)."""
    kept = without_keys(overrides, "ray.address")
    dropped = [o for o in overrides if o not in kept]
    if dropped:
        log.info("left out of the RayJob's command: %s (RAY_ADDRESS names the RayJob's cluster)", " ".join(dropped))
    return ["python", "jobs/generate.py", *with_ray_launcher(kept)]


def job_name(job: JobConfig, name: str | None = None) -> str:
    """``name`` checked against KubeRay's rules, or ``specbatch-<spec label>`` made to fit them.

    Raises:
        ConfigError: ``name`` is not a DNS-1035 label of at most 47 characters.
    """
    if name is not None:
        if len(name) > MAX_NAME_LENGTH or not _NAME.fullmatch(name):
            raise ConfigError(
                f"RayJob name {name!r}: KubeRay takes at most {MAX_NAME_LENGTH} characters of a-z, 0-9 and '-', "
                "starting with a letter and ending with a letter or digit, e.g. specbatch-run-1"
            )
        return name
    derived = re.sub(r"[^a-z0-9]+", "-", f"specbatch-{job.spec.label}".lower())
    return derived[:MAX_NAME_LENGTH].strip("-")


def _quantity(amount: float) -> str:
    """A whole number of CPUs or GPUs for a pod (Kubernetes gives a GPU whole): ``amount`` rounded up."""
    return str(math.ceil(amount))


def _env(job: JobConfig) -> list[dict[str, str]]:
    """``ray.env`` as container env. RAY_ADDRESS is KubeRay's to set (the cluster's own address), never ours."""
    assert job.ray is not None
    return [{"name": k, "value": str(v)} for k, v in job.ray.env.items() if k != "RAY_ADDRESS"]


def _container(name: str, image: str, resources: dict[str, str], env: list[dict[str, str]]) -> dict[str, Any]:
    """A Ray container (KubeRay takes the first one of a pod as Ray's); requests equal to limits, so each pod gets
    exactly what ``rayStartParams`` tells Ray it has."""
    container: dict[str, Any] = {
        "name": name,
        "image": image,
        "resources": {"limits": dict(resources), "requests": dict(resources)},
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }
    if env:
        container["env"] = env
    return container


def _head_group(job: JobConfig, image: str) -> dict[str, Any]:
    """The head: Ray's control processes and the driver (the Ray job's entrypoint runs there), no GPU.

    ``num-cpus: "0"`` keeps every replica off it (a replica reserves CPUs); the pod's own CPUs are the driver's."""
    # ray.env here too: the driver reads the data set (and a tokenizer) with the replicas' HF_HOME and token.
    container = _container("ray-head", image, {"cpu": HEAD_CPUS, "memory": HEAD_MEMORY}, _env(job))
    container["ports"] = [
        {"containerPort": 6379, "name": "gcs-server"},
        {"containerPort": 8265, "name": "dashboard"},
        {"containerPort": 10001, "name": "client"},
    ]
    return {
        "rayStartParams": {"dashboard-host": "0.0.0.0", "num-cpus": "0"},
        "template": {"spec": {"containers": [container], "volumes": _shm_volumes()}},
    }


def _worker_group(job: JobConfig, image: str) -> dict[str, Any]:
    """One pod per engine replica, each with what one replica reserves (ray.cpus_per_replica, ray.gpus(...))."""
    assert job.ray is not None
    cpus = _quantity(job.ray.cpus_per_replica)
    gpus = _quantity(job.ray.gpus(job.engine.name, job.model.tensor_parallel_size))
    resources = {"cpu": cpus}
    if gpus != "0":
        resources["nvidia.com/gpu"] = gpus
    replicas = job.ray.replicas
    return {
        "groupName": WORKER_GROUP,
        "replicas": replicas,
        "minReplicas": replicas,
        "maxReplicas": replicas,
        # num-gpus also when 0: an image that sees every GPU of its node (NVIDIA_VISIBLE_DEVICES=all) would
        # otherwise offer them to Ray without Kubernetes having given them to the pod.
        "rayStartParams": {"num-cpus": cpus, "num-gpus": gpus},
        "template": {
            "spec": {
                "containers": [_container("ray-worker", image, resources, _env(job))],
                "volumes": _shm_volumes(),
            }
        },
    }


def rayjob_manifest(job: JobConfig, overrides: list[str], image: str, name: str | None = None) -> dict[str, Any]:
    """The KubeRay RayJob that runs ``job`` (composed from ``overrides``, with ``launcher=ray``) on a cluster of its
    own: ``ray.replicas`` worker pods, deleted when the job ends.

    Raises:
        ConfigError: the job does not run on Ray (``launcher`` chose otherwise), or ``name`` is not one KubeRay takes.
    """
    if job.ray is None:
        raise ConfigError("the job runs in its own process (no ray section): a RayJob needs launcher=ray")
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": job_name(job, name)},
        "spec": {
            # KubeRay's submitter runs `ray job submit ... -- <entrypoint>` in bash, and `ray job submit` joins the
            # words it gets with shlex.join for the head's shell: one layer of shell quoting is right.
            "entrypoint": shlex.join(entrypoint_argv(overrides)),
            # 0 on purpose: Ray pins a job's driver to the head only while its entrypoint reserves nothing; with
            # CPUs reserved it goes to any node that has them, and only the workers do (the head has num-cpus 0),
            # where it would take CPUs a replica was given.
            "entrypointNumCpus": 0,
            "submissionMode": "K8sJobMode",
            "shutdownAfterJobFinishes": True,
            "ttlSecondsAfterFinished": TTL_SECONDS_AFTER_FINISHED,
            "rayClusterSpec": {
                "headGroupSpec": _head_group(job, image),
                "workerGroupSpecs": [_worker_group(job, image)],
            },
        },
    }


def manifest_yaml(manifest: dict[str, Any]) -> str:
    """The manifest as YAML for ``kubectl apply -f -``, its keys in the order they were built (apiVersion first)."""
    return yaml.dump(manifest, Dumper=_PlainDumper, sort_keys=False, width=10_000)
