"""The job as its parts compose it: the entry points of ``jobs/`` and of every caller that wants the whole product.

Each package below knows only the ones it builds on (config → data, assets → engine → run → tracking → analysis);
this module is where they meet. A shard job is the shard executor (specbatch.run.executor) running the generation
steps (specbatch.run.generate) while MLflow watches (specbatch.tracking.shard_run); a merge writes the merged files
(specbatch.run.status_merge) and then logs them (specbatch.tracking.merged).
"""

from __future__ import annotations

from pathlib import Path

from specbatch.assets.cache import unbuilt_embedded_head
from specbatch.cluster.ray_checks import check_runs_on_ray
from specbatch.common.interrupts import StopRequested, signal_name, stop_received
from specbatch.config import JobConfig
from specbatch.config.dtype import log_dtype_choice
from specbatch.engine import Engine
from specbatch.methods import SpecMethod
from specbatch.run.executor import JobResult, ShardExecutor
from specbatch.run.generate import ShardGeneration
from specbatch.run.multirun import SweepJob
from specbatch.run.status_merge import MergeResult, merge_shards
from specbatch.tracking.merged import log_merged
from specbatch.tracking.shard_run import TrackingObserver


def run_job(job: JobConfig, engine: Engine | None = None, sweep: SweepJob | None = None) -> JobResult:
    """Run (or finish, or find finished) this task's shard; ``engine`` lets callers share one engine across jobs.

    Inside a Hydra multirun, ``sweep`` nests the MLflow run under the sweep's parent and tags it with the job's
    choices.

    The shard is cut into chunks of ``chunk_size`` rows, all streamed through one engine (specbatch.run.streaming);
    each chunk is written as its own Parquet part as soon as its rows are finished, so a rerun after a kill redoes
    at most the chunks that were in flight. The done marker is written last.
    """
    log_dtype_choice(job.model.dtype_choice)
    build_named_head(job)
    steps: ShardGeneration
    if job.ray is not None:
        if engine is not None:
            raise ValueError("launcher=ray starts its engines in Ray actors: do not pass one in")
        check_runs_on_ray(job)
        # Imported here: Ray's client library is seconds of import a local job does without.
        from specbatch.cluster.ray_generation import RayShardGeneration

        steps = RayShardGeneration(job)
    elif job.spec.method is SpecMethod.auto:
        if engine is not None:
            raise ValueError("spec=auto starts an engine per set-up it measures: do not pass one in")
        # Imported here: spec=auto brings the decision, the replay (prediction) and the analysis it reads; a job of
        # one set-up needs none of them (tests/run/test_start_imports.py).
        from specbatch.auto.generation import AutoShardGeneration

        steps = AutoShardGeneration(job)
    else:
        steps = ShardGeneration(job, engine)
    return ShardExecutor(job, steps, TrackingObserver(job, sweep)).run()


def build_named_head(job: JobConfig) -> None:
    """The embedded model's own head, when the job names it (model_spec=smollm2_135m_eagle3) and it is not built
    yet: built here on its first use, before the checks that read it; by a batch job and by a server alike."""
    if unbuilt_embedded_head(job.spec.model):
        # Imported here: the export and training a job of a built head never needs.
        from specbatch.drafter.embedded_head import ensure_embedded_head

        ensure_embedded_head(job.spec.model)


def stop_after_job(result: JobResult, sweep: SweepJob | None = None) -> None:
    """After a job that returned: StopRequested if a stop signal came while it ran. It came once the shard's last
    chunks were admitted (earlier, the job would have stopped itself), so they were finished and the shard is
    complete; the process ends here with the stop's exit code, and a multirun launches no further job."""
    signum = stop_received()
    if signum is not None:
        raise StopRequested(
            f"stopped by {signal_name(signum)} once shard {result.folder.shard_tag} was complete (the chunks in "
            "flight when it came were finished and written)"
            + ("; Hydra launches no further job of this sweep: rerun the sweep to run the rest" if sweep else ""),
            signum,
        )


def merge_run(root: Path, log_to_mlflow: bool = True) -> MergeResult:
    """Check every shard is done, then write merged/manifest.json and merged/summary.json, and log them to MLflow
    as a parent run of the shards' runs (unless ``log_to_mlflow`` is off)."""
    result = merge_shards(root)
    if log_to_mlflow:
        log_merged(Path(root).resolve(), result.summary)
    return result
