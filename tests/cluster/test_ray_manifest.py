"""jobs/ray_job.py --print and specbatch.cluster.ray_manifest: the job as a KubeRay RayJob, with no cluster and no
model (the real conf/ composed, the YAML read back and checked against the CRD's required fields)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from conftest import PROJECT_ROOT, compose_job
from specbatch.cluster.ray_manifest import job_name, manifest_yaml, rayjob_manifest, with_ray_launcher
from specbatch.config import ConfigError

RAY_JOB = PROJECT_ROOT / "jobs" / "ray_job.py"
# The required lists of KubeRay's RayJob CRD on the paths the manifest fills (its "_source" names the release).
REQUIRED = json.loads((PROJECT_ROOT / "tests" / "fixtures" / "kuberay_rayjob_required.json").read_text())
GPU_PRESET = ["model=llama31_8b_instruct", "spec=eagle3", "engine=gpu"]
# RFC 1123 label; KubeRay also wants a letter first (DNS-1035) and at most 47 characters (MaxRayJobNameLength).
RFC1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def ray_job(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(RAY_JOB), *args], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120
    )


def manifest(overrides: list[str], **kwargs: Any) -> dict[str, Any]:
    """The manifest as jobs/ray_job.py builds it, in this process, read back from its YAML."""
    job = compose_job(with_ray_launcher(overrides))
    return yaml.safe_load(manifest_yaml(rayjob_manifest(job, overrides, "registry.example/specbatch:1", **kwargs)))


def nodes_at(tree: Any, path: str) -> list[Any]:
    """Every value at a dotted path, ``[]`` standing for each item of an array (``containers[].env[]``)."""
    found = [tree]
    for part in path.split("."):
        key, items = part.removesuffix("[]"), part.endswith("[]")
        found = [node[key] for node in found if isinstance(node, dict) and key in node]
        if items:
            found = [item for array in found for item in array]
    return found


def containers(m: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(head containers, worker containers)."""
    cluster = "spec.rayClusterSpec"
    head = nodes_at(m, f"{cluster}.headGroupSpec.template.spec.containers[]")
    return head, nodes_at(m, f"{cluster}.workerGroupSpecs[].template.spec.containers[]")


def test_the_printed_rayjob_has_every_field_the_crd_requires() -> None:
    result = ray_job("--print", *GPU_PRESET, "ray.replicas=2", "+ray.env.HF_HOME=/data/hf")
    assert result.returncode == 0, result.stderr
    m = yaml.safe_load(result.stdout)
    assert (m["apiVersion"], m["kind"]) == ("ray.io/v1", "RayJob")
    assert REQUIRED["_source"]["repo"] == "ray-project/kuberay" and REQUIRED["_source"]["commit"]
    paths = [p for p in REQUIRED if not p.startswith("_")]
    assert "spec.rayClusterSpec.workerGroupSpecs[]" in paths
    for path in paths:
        nodes = nodes_at(m, path)
        # Every path of the excerpt is one this manifest fills (env[] because of ray.env): none is checked vacuously.
        assert nodes, f"{path} is not in the manifest"
        for node in nodes:
            assert set(REQUIRED[path]) <= set(node), f"{path} lacks {set(REQUIRED[path]) - set(node)}"


def test_the_entrypoint_is_the_generate_command() -> None:
    overrides = [*GPU_PRESET, "ray.replicas=2", "ray.address=auto", "+ray.env.HF_HOME=/data/hf cache"]
    result = ray_job("--print", *overrides)
    assert result.returncode == 0, result.stderr
    entrypoint = yaml.safe_load(result.stdout)["spec"]["entrypoint"]
    # ray.address dropped (RAY_ADDRESS names the RayJob's cluster), launcher=ray added, the space kept quoted.
    expected = [
        "python",
        "jobs/generate.py",
        "launcher=ray",
        *GPU_PRESET,
        "ray.replicas=2",
        "+ray.env.HF_HOME=/data/hf cache",
    ]
    assert shlex.split(entrypoint) == expected
    assert "ray.address" not in entrypoint and "ray.address=auto" in result.stderr


def test_a_launcher_on_the_command_line_is_kept_and_not_doubled() -> None:
    overrides = ["ray.replicas=3", "launcher=ray", "+ray.address=host:6379"]
    m = manifest(overrides)
    assert shlex.split(m["spec"]["entrypoint"]) == ["python", "jobs/generate.py", "ray.replicas=3", "launcher=ray"]
    assert nodes_at(m, "spec.rayClusterSpec.workerGroupSpecs[].replicas") == [3]


def test_gpu_workers_reserve_the_replicas_gpus() -> None:
    m = manifest([*GPU_PRESET, "ray.replicas=2"])
    (group,) = m["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (2, 2, 2)
    assert group["rayStartParams"] == {"num-cpus": "1", "num-gpus": "1"}
    head, workers = containers(m)
    for worker in workers:
        assert worker["resources"]["limits"] == worker["resources"]["requests"] == {"cpu": "1", "nvidia.com/gpu": "1"}
    # The head runs the driver only: no GPU, no CPU Ray could give a replica.
    assert all("nvidia.com/gpu" not in c["resources"]["limits"] for c in head)
    assert m["spec"]["rayClusterSpec"]["headGroupSpec"]["rayStartParams"] == {
        "dashboard-host": "0.0.0.0",
        "num-cpus": "0",
    }


def test_tensor_parallel_workers_get_one_gpu_per_vllm_worker() -> None:
    m = manifest([*GPU_PRESET, "model.tensor_parallel_size=2"])
    _, workers = containers(m)
    assert [w["resources"]["limits"]["nvidia.com/gpu"] for w in workers] == ["2"]
    assert nodes_at(m, "spec.rayClusterSpec.workerGroupSpecs[].rayStartParams.num-gpus") == ["2"]


def test_cpu_workers_ask_for_no_gpu_and_whole_cpus() -> None:
    m = manifest(["ray.cpus_per_replica=1.5", "+ray.env.HF_HOME=/data/hf", "+ray.env.RAY_ADDRESS=elsewhere:6379"])
    head, workers = containers(m)
    for container in [*head, *workers]:
        for amounts in container["resources"].values():
            assert "nvidia.com/gpu" not in amounts
        assert {"name": "HF_HOME", "value": "/data/hf"} in container["env"]
        assert "RAY_ADDRESS" not in {e["name"] for e in container["env"]}
    assert [w["resources"]["limits"]["cpu"] for w in workers] == ["2"]
    assert nodes_at(m, "spec.rayClusterSpec.workerGroupSpecs[].rayStartParams") == [{"num-cpus": "2", "num-gpus": "0"}]
    assert (m["spec"]["shutdownAfterJobFinishes"], m["spec"]["submissionMode"]) == (True, "K8sJobMode")
    assert m["spec"]["entrypointNumCpus"] == 0 and m["spec"]["ttlSecondsAfterFinished"] > 0


@pytest.mark.parametrize("label", ["ngram-k3", "Eagle3_K3.x", "ngram-sched-1to4k5-5to256k0-" * 4, "--a--"])
def test_the_name_is_a_label_kuberay_takes(label: str) -> None:
    name = job_name(SimpleNamespace(spec=SimpleNamespace(label=label)))  # type: ignore[arg-type]
    assert RFC1123_LABEL.fullmatch(name) and name[0].isalpha() and len(name) <= 47, name
    assert name.startswith("specbatch-")


def test_the_derived_name_keeps_the_labels_letters() -> None:
    assert job_name(SimpleNamespace(spec=SimpleNamespace(label="Eagle3_K3.x"))) == "specbatch-eagle3-k3-x"  # type: ignore[arg-type]


def test_the_name_of_a_composed_job() -> None:
    assert manifest(GPU_PRESET)["metadata"]["name"] == "specbatch-eagle3-k3"
    assert manifest([], name="my-run-1")["metadata"]["name"] == "my-run-1"
    with pytest.raises(ConfigError, match="RayJob name 'My_Run'"):
        manifest([], name="My_Run")


def test_a_job_that_runs_in_its_own_process_has_no_rayjob() -> None:
    with pytest.raises(ConfigError, match="launcher=ray"):
        rayjob_manifest(compose_job([]), [], "specbatch:latest")


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--print", "ray.replicas=0"], "ray.replicas"),
        (["--print", "--name", "Bad_Name"], "RayJob name"),
        (["ray.replicas=2"], "--print"),
        # The job would refuse it: a RayJob of it could only fail.
        (["--print", "spec=auto"], "spec=auto"),
    ],
)
def test_a_mistake_exits_2_with_one_line(args: list[str], named: str) -> None:
    result = ray_job(*args)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0], result.stderr
