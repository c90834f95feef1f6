"""launcher=ray on a real two-raylet Ray cluster on this machine (tests/cluster/ray_cluster.py): the job's rows through
Ray Data to engine replicas, every (row, turn, sample) exactly once across a replica killed mid-run and a driver killed
and rerun, the second of two drivers refused, the run equal to a local one token for token with real vLLM, and the
printed KubeRay entrypoint run as written. Each job is jobs/generate.py as a user runs it, a driver of the cluster.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from tests.cluster.ray_cluster import RayCluster, start_cluster
from tests.conftest import GENERATE, PROJECT_ROOT, run_generate

pytestmark = pytest.mark.slow

# Generous bounds for events (a job's end, a part written); none of them is waited for by a fixed sleep.
JOB_BOUND = 600
EVENT_BOUND = 300


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[RayCluster]:
    started = start_cluster()
    try:
        yield started
    finally:
        started.stop()
    assert started.processes() == [], "every process of the test cluster is gone"


@pytest.fixture
def cluster(ray_cluster: RayCluster) -> Iterator[RayCluster]:
    """The module's cluster, each test's jobs with theirs: a job's replicas end with it (Ray ends the actors of a
    driver that is gone, within seconds of its end)."""
    yield ray_cluster
    _wait(lambda: not ray_cluster.replica_processes(), "end of the job's replicas", bound=120)


def _data(folder: Path, rows: int) -> Path:
    path = folder / f"rows-{rows}.jsonl"
    path.write_text(
        "".join(json.dumps({"id": f"r{i}", "q": f"question {i} " * (1 + i % 5)}) + "\n" for i in range(rows))
    )
    return path


def _dummy_args(out: Path, data: Path, *extra: str) -> list[str]:
    return [
        "launcher=ray",
        "engine.backend=dummy",
        "dataset=local",
        f"dataset.path={data}",
        "dataset.template='{q}'",
        "dataset.id_column=id",
        "max_samples=null",
        "sampling.max_tokens=32",
        f"output_root={out}",
        "tracking=off",
        "progress.display=lines",
        *extra,
    ]


def _run_folder(out: Path) -> Path:
    (run,) = [p for p in (out / "runs").glob("*/*/*") if (p / "run.json").is_file()]
    return run


def _rows(out: Path) -> list[dict]:
    parts = sorted(_run_folder(out).glob("data/*/part-*.parquet"))
    return [row for part in parts for row in pq.read_table(part).to_pylist()]


def _keys(rows: list[dict]) -> Counter:
    return Counter((r["row_id"], r["turn"], r["sample_index"]) for r in rows)


def _wait(condition, what: str, bound: float = EVENT_BOUND, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + bound
    while not condition():
        assert proc is None or proc.poll() is None, f"the job ended (exit {proc.returncode}) before {what}"
        assert time.monotonic() < deadline, f"no {what} within {bound:.0f} s"
        time.sleep(0.2)


def _parts(out: Path) -> list[Path]:
    return sorted((out / "runs").glob("*/*/*/data/*/part-*.parquet"))


def _launch(cluster: RayCluster, args: list[str], log: Path) -> subprocess.Popen:
    env = {**cluster.env, "PYTHONUNBUFFERED": "1"}
    with log.open("w") as sink:
        return subprocess.Popen(
            [sys.executable, str(GENERATE), *args],
            cwd=PROJECT_ROOT,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _replicas(out: Path) -> list[dict]:
    return [
        replica
        for path in sorted(_run_folder(out).glob("stats/*/replicas-*.json"))
        for replica in json.loads(path.read_text())["replicas"]
    ]


def test_two_replicas_on_two_raylets_write_every_row_once(cluster: RayCluster, tmp_path: Path) -> None:
    out, data = tmp_path / "out", _data(tmp_path, 1000)
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    # Steps that take time (0.02 s), so that both replicas are up before the chunks run out.
    args = _dummy_args(out, data, "spec=ngram", "chunk_size=50", "ray.replicas=2", "ray.cpus_per_replica=2")
    args.append("engine.step_seconds=0.02")
    done = run_generate([*[a for a in args if a != "tracking=off"], f"tracking.uri={store}"], env=cluster.env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = _rows(out)
    assert _keys(rows) == Counter({(f"r{i}", 1, 0): 1 for i in range(1000)})
    assert all(r["error"] is None for r in rows)
    # Each replica a raylet's (2 CPUs each, 2 per replica): both answered chunks, with their own figures.
    replicas = _replicas(out)
    assert len({r["node_id"] for r in replicas}) == 2
    assert all(r["rows"] > 0 and r["output_tokens"] > 0 for r in replicas)
    assert sum(r["rows"] for r in replicas) == 1000
    # The run is a run like any other: complete for status, merged as a local run is.
    for script, says in (
        ("jobs/status.py", "1 done, 0 running, 0 partial, 0 missing of 1 shards"),
        ("jobs/merge.py", ""),
    ):
        done = subprocess.run(
            [sys.executable, script, str(_run_folder(out))], cwd=PROJECT_ROOT, capture_output=True, text=True
        )
        assert done.returncode == 0 and says in done.stderr, done.stdout + done.stderr
    assert (_run_folder(out) / "merged" / "summary.json").is_file()
    # MLflow: one run for the job, with the replicas' figures beside the whole run's.
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=store)
    (experiment,) = [e for e in client.search_experiments() if e.name == "specbatch/local"]
    (run,) = client.search_runs([experiment.experiment_id], "tags.launcher = 'ray'")
    assert run.info.status == "FINISHED" and run.data.metrics["rows"] == 1000
    assert run.data.metrics["replica_0/rows"] + run.data.metrics["replica_1/rows"] == 1000


def test_a_replica_killed_mid_run_is_restarted_and_every_row_is_written_once(
    cluster: RayCluster, tmp_path: Path
) -> None:
    out, data = tmp_path / "out", _data(tmp_path, 100)
    # One replica: the run can only end if Ray starts it again and asks its chunk again.
    args = _dummy_args(out, data, "chunk_size=10", "ray.replicas=1", "engine.step_seconds=0.05")
    job = _launch(cluster, args, tmp_path / "job.log")
    try:
        _wait(lambda: _parts(out), "part written", proc=job)
        (victim,) = cluster.replica_processes()
        os.kill(victim.pid, signal.SIGKILL)
        killed_at = time.time_ns()
        assert job.wait(timeout=JOB_BOUND) == 0, (tmp_path / "job.log").read_text()[-4000:]
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    assert _keys(_rows(out)) == Counter({(f"r{i}", 1, 0): 1 for i in range(100)})
    # Killed mid-run: parts were written after it, by the replica Ray started again (a new id, another process).
    assert any(p.stat().st_mtime_ns > killed_at for p in _parts(out))
    replicas = _replicas(out)
    assert [r["pid"] for r in replicas if r["pid"] == victim.pid] and len({r["pid"] for r in replicas}) == 2, replicas


def test_a_killed_driver_resumes_and_a_second_driver_is_refused(cluster: RayCluster, tmp_path: Path) -> None:
    out, data = tmp_path / "out", _data(tmp_path, 120)
    args = _dummy_args(out, data, "chunk_size=10", "engine.step_seconds=0.1")
    first = _launch(cluster, args, tmp_path / "first.log")
    try:
        _wait(lambda: _parts(out), "part written", proc=first)
        # Paused mid-run (it holds the shard's lock and writes no further part) for as long as the second driver
        # takes to be refused, however slow the machine: then killed, mid-run by construction.
        os.kill(first.pid, signal.SIGSTOP)
        second = run_generate(args, env=cluster.env, timeout=JOB_BOUND)
        assert second.returncode == 3, second.stdout[-2000:] + second.stderr[-2000:]
        assert "being generated by" in second.stdout + second.stderr
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=60)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    kept = {p.name: p.stat().st_mtime_ns for p in _parts(out)}
    # Its actors end with it (Ray ends a dead driver's actors); then the rerun does the rest.
    _wait(lambda: not cluster.replica_processes(), "end of the killed driver's replicas")
    again = run_generate(args, env=cluster.env, timeout=JOB_BOUND)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert _keys(_rows(out)) == Counter({(f"r{i}", 1, 0): 1 for i in range(120)})
    assert len(kept) < 12, "the driver was killed mid-run"
    assert {name: mtime for name, mtime in kept.items()} == {
        p.name: p.stat().st_mtime_ns for p in _parts(out) if p.name in kept
    }, "the killed launch's parts are kept as they were"


def test_a_replica_no_node_has_room_for_ends_the_job_with_one_line(cluster: RayCluster, tmp_path: Path) -> None:
    out, data = tmp_path / "out", _data(tmp_path, 10)
    args = _dummy_args(out, data, "ray.cpus_per_replica=64", "ray.placement_timeout_seconds=3")
    done = run_generate(args, env=cluster.env, timeout=JOB_BOUND)
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    errors = [line for line in (done.stdout + done.stderr).splitlines() if "[ERROR]" in line]
    assert len(errors) == 1 and "no node of the Ray cluster had room for one replica" in errors[0], errors
    assert "ray.cpus_per_replica" in errors[0] and "ray.placement_timeout_seconds=3" in errors[0]


def test_the_printed_rayjob_entrypoint_runs_as_written(cluster: RayCluster, tmp_path: Path) -> None:
    out, data = tmp_path / "out", _data(tmp_path, 12)
    overrides = [a for a in _dummy_args(out, data, "chunk_size=4") if a != "launcher=ray"]
    printed = subprocess.run(
        [sys.executable, "jobs/ray_job.py", "--print", *overrides],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    import yaml

    entrypoint = yaml.safe_load(printed.stdout)["spec"]["entrypoint"]
    # As the RayJob's submitter runs it: through a shell, with `python` the image's (here the venv's).
    env = {**cluster.env, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-c", entrypoint], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert _keys(_rows(out)) == Counter({(f"r{i}", 1, 0): 1 for i in range(12)})
    assert shlex.split(entrypoint)[:3] == ["python", "jobs/generate.py", "launcher=ray"]


# Real vLLM: n-gram in float32 on the embedded model, two seeded samples per row (both speculated).
VLLM = [
    "spec=ngram",
    "model.dtype=float32",
    "max_samples=16",
    "sampling=sampled",
    "sampling.n=2",
    "sampling.max_tokens=48",
    "engine.warmup=false",
    "tracking=off",
]


def test_real_vllm_on_ray_equals_the_local_run_sample_for_sample(cluster: RayCluster, tmp_path: Path) -> None:
    local = run_generate([*VLLM, f"output_root={tmp_path / 'local'}"], timeout=JOB_BOUND)
    assert local.returncode == 0, local.stderr[-4000:]
    on_ray = run_generate([*VLLM, "launcher=ray", f"output_root={tmp_path / 'ray'}"], env=cluster.env)
    assert on_ray.returncode == 0, on_ray.stdout[-3000:] + on_ray.stderr[-3000:]
    # Where a run goes does not name it: the same run folder, in the same Parquet schema.
    assert _run_folder(tmp_path / "local").name == _run_folder(tmp_path / "ray").name
    local_parts = sorted(_run_folder(tmp_path / "local").glob("data/*/part-*.parquet"))
    ray_parts = sorted(_run_folder(tmp_path / "ray").glob("data/*/part-*.parquet"))
    assert pq.read_schema(local_parts[0]).remove_metadata() == pq.read_schema(ray_parts[0]).remove_metadata()

    def by_key(rows: list[dict]) -> dict[tuple, dict]:
        return {(r["row_id"], r["turn"], r["sample_index"]): r for r in rows}

    expected, got = by_key(_rows(tmp_path / "local")), by_key(_rows(tmp_path / "ray"))
    assert len(expected) == 32 and set(got) == set(expected)
    for key, row in expected.items():
        assert got[key] == row, key
    # Both samples of a row, each with its own seed, text and acceptance figures.
    rows = list(got.values())
    assert all(r["status"] == "ok" and r["spec_steps"] and r["acceptance_histogram"] for r in rows)
    firsts = {r["row_id"]: r for r in rows if r["sample_index"] == 0}
    seconds = {r["row_id"]: r for r in rows if r["sample_index"] == 1}
    assert all(firsts[i]["seed"] != seconds[i]["seed"] for i in firsts)
    assert sum(firsts[i]["completion"] != seconds[i]["completion"] for i in firsts) >= 8
    assert len({(r["spec_steps"], r["accepted_tokens"]) for r in rows}) > 2


def test_a_replica_dying_more_often_than_ray_restarts_it_ends_the_job_with_one_line(
    cluster: RayCluster, tmp_path: Path
) -> None:
    out, data = tmp_path / "out", _data(tmp_path, 60)
    args = _dummy_args(out, data, "chunk_size=10", "engine.step_seconds=0.05")
    job = _launch(cluster, [*args, "ray.max_restarts=0"], tmp_path / "job.log")
    try:
        _wait(lambda: _parts(out), "part written", proc=job)
        (victim,) = cluster.replica_processes()
        os.kill(victim.pid, signal.SIGKILL)
        assert job.wait(timeout=JOB_BOUND) == 1
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    said = (tmp_path / "job.log").read_text()
    assert "the engine replicas on Ray failed" in said and "rerun the same command" in said, said[-3000:]
    kept = len(_parts(out))
    again = run_generate(args, env=cluster.env, timeout=JOB_BOUND)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert _keys(_rows(out)) == Counter({(f"r{i}", 1, 0): 1 for i in range(60)}) and 0 < kept < 6
