"""One generation job end to end: config → rows → prompts → engine → Parquet + summary + MLflow.

Everything that can fail on bad input (config, data file, columns, prompt lengths, missing packages) runs before
the engine starts, so a mistake costs seconds, not a model load.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from specbatch.config import JobConfig, to_plain_dict, to_yaml
from specbatch.conversation import generate_rows
from specbatch.data import load_rows
from specbatch.embedded import ensure_embedded
from specbatch.engine import Engine, engine_fingerprint
from specbatch.environment import runtime_info
from specbatch.layout import RunLayout, atomic_write_json, atomic_write_text
from specbatch.preflight import preflight
from specbatch.prompts import check_chat_template, load_tokenizer
from specbatch.records import write_parquet
from specbatch.summary import Summary, format_table, summarize
from specbatch.tracking import flatten, mlflow_run

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobResult:
    layout: RunLayout
    summary: Summary
    parquet_files: list[Path]
    # False when the run was already complete and nothing was generated.
    generated: bool


def run_job(job: JobConfig, engine: Engine | None = None) -> JobResult:
    """Run (or find finished) the job; ``engine`` lets callers share one engine across jobs that agree on it."""
    layout = RunLayout.for_job(job)
    if layout.done_marker.exists():
        log.info("already complete, nothing to do: %s (delete it or set run_name=... to run again)", layout.root)
        summary = Summary(**json.loads(layout.stats_path.read_text()))
        return JobResult(layout, summary, sorted(layout.data_dir.glob("part-*.parquet")), generated=False)

    if engine is not None and engine.fingerprint != engine_fingerprint(job):
        raise ValueError("the engine passed in was built for another model/spec/engine config than this job")
    rows = load_rows(job.dataset, job.max_samples)
    if job.model.embedded is not None:
        ensure_embedded(job.model.embedded, job.model.path)
    tokenizer = load_tokenizer(job.model)
    check_chat_template(job.dataset, tokenizer)
    preflight(job)

    config = to_plain_dict(job)
    info = runtime_info()
    _record_run(layout, job, info)
    tags = {
        "method": job.spec.method.value,
        "k": str(job.spec.k) if job.spec.k is not None else "none",
        "model": job.model.name,
        "dataset": job.dataset.name,
        "run_folder": str(layout.root),
        "mlflow.source.git.commit": info["git_commit"],
        **info,
    }
    run_name = f"{job.model.name}/{job.spec.label}/{job.dataset.name}"
    description = (
        f"{job.spec.label} on {job.model.name} over {len(rows)} rows of {job.dataset.name}; outputs in {layout.root}"
    )
    with mlflow_run(job.tracking, run_name, tags, description) as run:
        if run:
            run.log_params(flatten(config))
        own_engine = engine is None
        if own_engine:
            engine = Engine.start(job)
        try:
            batch = generate_rows(engine, rows, job, tokenizer)
        finally:
            if own_engine:
                engine.close()
        records = batch.records
        part = layout.part_path(0)
        write_parquet(records, part, config)
        summary = summarize(
            batch.counters,
            method=job.spec.method.value,
            k=job.spec.k,
            records=records,
            generation_seconds=batch.seconds,
            engine_startup_seconds=engine.startup_seconds,
            warmup_seconds=engine.warmup_seconds,
        )
        atomic_write_json(layout.stats_path, summary.to_dict())
        if run:
            run.log_summary(summary)
            run.log_text(to_yaml(job), "config.yaml")
            run.log_text(json.dumps(summary.to_dict(), indent=2), "summary.json")
        # Written last: its presence promises every file above is complete.
        atomic_write_text(layout.done_marker, time.strftime("%Y-%m-%dT%H:%M:%S%z") + "\n")
    log.info("summary of %s\n%s", layout.root, format_table(summary))
    log.info("wrote %d rows (%d error rows) to %s", len(records), summary.error_rows, part)
    return JobResult(layout, summary, [part], generated=True)


def _record_run(layout: RunLayout, job: JobConfig, info: dict[str, str]) -> None:
    """run.json and config.yaml describe the run folder; written once, before any data."""
    layout.root.mkdir(parents=True, exist_ok=True)
    atomic_write_text(layout.config_yaml, to_yaml(job))
    if not layout.run_json.exists():
        atomic_write_json(
            layout.run_json,
            {"config": to_plain_dict(job), "shard_count": layout.shard_count, "created_with": info},
        )
