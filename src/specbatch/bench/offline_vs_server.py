"""Offline engine against a vLLM server on the same prompts (jobs/bench_server.py): tok/s, AL, identical rows.

For each method, the offline job runs first, then ``jobs/serve.py``'s server is started for the same composed config
and the job runs again with ``engine.backend=server``. Float32 and greedy, so the completions must be identical; the
same batch on both sides (the offline engine's ``max_num_seqs`` equals the requests the job keeps in flight on the
server). One run each on a noisy 2-core machine: read the ratios, not the absolutes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from specbatch.backends.vllm.vllm_server import VllmServer
from specbatch.bench import machine_header
from specbatch.config import compose_job
from specbatch.pipeline import run_job
from specbatch.run.records.output_parts import read_rows
from specbatch.run.summary import Summary

METHODS = (["spec=none"], ["spec=ngram"])


@dataclass(frozen=True)
class Measured:
    label: str
    backend: str
    summary: Summary
    # Every output row by (row id, turn, sample): its status and completion token ids.
    rows: dict[tuple[str, int, int], tuple[str, list[int]]]


def _rows(parquet_files: list) -> dict[tuple[str, int, int], tuple[str, list[int]]]:
    return {
        (r["row_id"], r["turn"], r["sample_index"]): (r["status"], r["completion_token_ids"])
        for r in read_rows(parquet_files)
    }


def run_offline_and_server(
    max_samples: int, max_tokens: int, batch: int, port: int, output_root: str
) -> list[Measured]:
    """Each method offline, then through a server started for the same config (one engine at a time)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    measured = []
    for extra in METHODS:
        label = extra[0].removeprefix("spec=")
        common = [
            *extra,
            "model.dtype=float32",
            "sampling=greedy",
            f"max_samples={max_samples}",
            f"sampling.max_tokens={max_tokens}",
            f"engine.max_num_seqs={batch}",
            f"engine.max_concurrency={batch}",
            f"engine.url=http://127.0.0.1:{port}/v1",
            f"output_root={output_root}",
            "tracking.experiment=bench_server",
        ]
        offline = run_job(compose_job([*common, f"run_name={label}-offline-{stamp}"]))
        measured.append(Measured(label, "offline", offline.summary, _rows(offline.parquet_files)))
        job = compose_job([*common, "engine.backend=server", f"run_name={label}-server-{stamp}"])
        with VllmServer.start(job):
            served = run_job(job)
        measured.append(Measured(label, "server", served.summary, _rows(served.parquet_files)))
    return measured


def server_table(measured: list[Measured]) -> str:
    """A Markdown table: each method offline and through the server, the server's rows against the offline ones."""
    lines = [
        machine_header(),
        "",
        "| method | engine | output tok/s | vs offline | AL | draft acceptance | figures from | identical rows |",
        "|---|---|---|---|---|---|---|---|",
    ]
    offline = {m.label: m for m in measured if m.backend == "offline"}
    for m in measured:
        base = offline[m.label]
        same = sum(m.rows.get(key) == value for key, value in base.rows.items())
        al = "-" if m.summary.mean_acceptance_length is None else f"{m.summary.mean_acceptance_length:.3f}"
        rate = "-" if m.summary.draft_acceptance_rate is None else f"{m.summary.draft_acceptance_rate:.3f}"
        ratio = m.summary.output_tokens_per_second / base.summary.output_tokens_per_second
        lines.append(
            f"| {m.label} | {m.backend} | {m.summary.output_tokens_per_second:.1f} | {ratio:.2f} | {al} | {rate} | "
            f"{m.summary.counters_scope or '-'} | {same}/{len(base.rows)} |"
        )
    return "\n".join(lines)
