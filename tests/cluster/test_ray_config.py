"""launcher=ray without a cluster: the ``ray`` section's checks, what a replica reserves, the refusals before anything
loads, where the run goes, the progress sums and the replicas' record (the Ray runs themselves: test_ray_cpu.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.conftest import CONF_DIR, compose_job

from specbatch.cluster.ray_progress import ChunkFigures, LaunchProgress
from specbatch.config import ConfigError, run_folder_digest
from specbatch.config.overrides import check_overrides
from specbatch.engine.spec_metrics import Counters
from specbatch.pipeline import run_job
from specbatch.run.folder import RunFolder
from specbatch.run.records.replica_figures import (
    read_all_replica_figures,
    replica_figures_path,
    write_replica_figures,
)


def test_launcher_ray_fills_the_section_and_the_default_leaves_it_empty() -> None:
    assert compose_job([]).ray is None
    ray = compose_job(["launcher=ray", "ray.replicas=3", "ray.address=auto", "+ray.env.HF_HOME=/data/hf"]).ray
    assert ray is not None and (ray.replicas, ray.address, ray.env) == (3, "auto", {"HF_HOME": "/data/hf"})


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("ray.replicas=0", "ray.replicas=0 must be 1 or more"),
        ("ray.cpus_per_replica=0", "ray.cpus_per_replica=0.0 must be more than 0"),
        ("ray.gpus_per_replica=-1", "ray.gpus_per_replica=-1.0 must be 0 or more"),
        ("ray.max_restarts=-2", "ray.max_restarts=-2 must be -1"),
        ("ray.address=' '", "ray.address is empty"),
    ],
)
def test_bad_ray_values_are_refused_naming_the_key(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        compose_job(["launcher=ray", override])


def test_a_ray_key_without_launcher_ray_says_to_add_it() -> None:
    with pytest.raises(ConfigError, match="ray.replicas is set but the job runs in this process: add launcher=ray"):
        check_overrides(["ray.replicas=2"], CONF_DIR)
    check_overrides(["launcher=ray", "ray.replicas=2"], CONF_DIR)


def test_a_replica_reserves_one_gpu_per_vllm_worker_on_gpu_and_none_on_cpu() -> None:
    cpu = compose_job(["launcher=ray"])
    assert cpu.ray is not None and cpu.ray.gpus(cpu.engine.name, cpu.model.tensor_parallel_size) == 0
    gpu = compose_job(["launcher=ray", "model=llama31_8b_instruct", "engine=gpu", "model.tensor_parallel_size=2"])
    assert gpu.ray is not None and gpu.ray.gpus(gpu.engine.name, gpu.model.tensor_parallel_size) == 2
    pinned = compose_job(["launcher=ray", "ray.gpus_per_replica=0.5", "engine=gpu", "model=llama31_8b_instruct"])
    assert pinned.ray is not None and pinned.ray.gpus("gpu", 1) == 0.5


def test_where_the_job_runs_is_not_in_the_run_folder(tmp_path: Path) -> None:
    local = compose_job([f"output_root={tmp_path}"])
    on_ray = compose_job([f"output_root={tmp_path}", "launcher=ray", "ray.replicas=4", "ray.address=auto"])
    assert RunFolder.for_job(local).root == RunFolder.for_job(on_ray).root
    assert run_folder_digest(local) == run_folder_digest(on_ray)


def test_spec_auto_on_ray_is_refused_before_anything_starts(tmp_path: Path) -> None:
    job = compose_job([f"output_root={tmp_path}", "launcher=ray", "spec=auto", "tracking=off"])
    with pytest.raises(ConfigError, match="spec=auto .* does not run on Ray yet"):
        run_job(job)
    assert not (tmp_path / "runs").exists()


def test_progress_adds_written_chunks_to_the_latest_report_of_each_in_flight() -> None:
    progress = LaunchProgress(board=None)
    progress.in_flight[0] = ChunkFigures(3, 6, Counters(generation_tokens=30, drafts=10, accepted_tokens=12))
    progress.in_flight[1] = ChunkFigures(1, 2, Counters(generation_tokens=9))
    # Chunk 0 asked again on a restarted replica: its new report replaces the dead attempt's, never adds to it.
    progress.in_flight[0] = ChunkFigures(1, 2, Counters(generation_tokens=8, drafts=2, accepted_tokens=2))
    total = progress.total()
    assert (total.rows, total.samples, total.counters.generation_tokens) == (2, 4, 17)
    # Written: its result's figures count, its reports no longer.
    progress.chunk_written(0, 4, 8, Counters(generation_tokens=40, drafts=12, accepted_tokens=15))
    total = progress.total()
    assert (total.rows, total.samples, total.counters.generation_tokens, total.counters.drafts) == (5, 10, 49, 12)


def test_the_replicas_record_reads_back_and_a_damaged_one_is_skipped(tmp_path: Path) -> None:
    figures = [{"replica": "a1", "rows": 10, "output_tok_s": 12.5}, {"replica": "b2", "rows": 5, "output_tok_s": 3.0}]
    write_replica_figures(replica_figures_path(tmp_path, "launch1"), figures)
    (tmp_path / "replicas-launch2.json").write_text("{not json")
    assert [r["replica"] for r in read_all_replica_figures(tmp_path)] == ["a1", "b2"]
    assert json.loads(replica_figures_path(tmp_path, "launch1").read_text())["format"] == 1
