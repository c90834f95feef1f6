"""Check a finished sampled run: the referee scores every sample's tokens with the run's own target and sampler,
and the verdict (specbatch.analysis.lossless.evidence) is written to ``RUN/lossless/lossless.json``. No baseline run
is needed: the target itself is the reference.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from scipy import stats

from specbatch.analysis.lossless.evidence import ALPHA, BINS
from specbatch.analysis.lossless.referee import Referee
from specbatch.analysis.lossless.sampler import Sampler
from specbatch.common.atomic_files import atomic_write_text
from specbatch.common.errors import require
from specbatch.common.machine import this_machine
from specbatch.common.png import pyplot, save_png
from specbatch.config.sampling import SamplingConfig
from specbatch.engine import not_a_models_answers
from specbatch.run.folder import read_run, shard_folders
from specbatch.run.output_rows import STATUS_OK
from specbatch.run.records.record_files import RecordError
from specbatch.run.records.run_json import DAMAGED_FIX, RUN_RECORD
from specbatch.run.status_merge import finished_summary

log = logging.getLogger(__name__)

COLUMNS = ["row_id", "turn", "sample_index", "status", "prompt_token_ids", "completion_token_ids"]
# The recorded sampling keys the referee redoes, each with the types its value may have (JSON numbers).
_SAMPLER_KEYS: dict[str, tuple[type, ...]] = {"temperature": (int, float), "top_p": (int, float), "top_k": (int,)}


def result_path(root: Path) -> Path:
    return Path(root) / "lossless" / "lossless.json"


def sampled_rows(root: Path) -> Iterator[dict[str, Any]]:
    """Every generated sample of the run (all shards, all turns), with the prompt token ids the engine saw."""
    for folder in shard_folders(Path(root)):
        for part in folder.parts():
            for row in pq.read_table(part, columns=COLUMNS).to_pylist():
                if row["status"] == STATUS_OK:
                    yield row


def run_sampler(config: dict[str, Any], record: Path) -> Sampler:
    """The run's sampler from its recorded config (ConfigError for a greedy run); RecordError naming ``record`` (the
    run.json it was read from) and the key when a sampling key is missing or not a number."""
    recorded = config.get("sampling")
    values = {}
    for key, kinds in _SAMPLER_KEYS.items():
        value = recorded.get(key) if isinstance(recorded, dict) else None
        # bool is an int to Python, not a number to JSON.
        if isinstance(value, bool) or not isinstance(value, kinds):
            wrong = f"it lacks sampling.{key}" if value is None else f"sampling.{key} is {value!r}, not a number"
            raise RecordError(f"{record} is damaged ({wrong})", DAMAGED_FIX)
        values[key] = value
    return Sampler.of(SamplingConfig(**values))


def check_run(root: Path, asked: Sampler | None = None) -> dict[str, Any]:
    """The run's verdict, written to result_path(root) (replacing an earlier check's) and returned. ``asked``: the
    sampler to check against instead of the run's own (a planted fault: the engine ran another)."""
    root = Path(root).resolve()
    finished_summary(root)  # RunIncompleteError for a run that is not finished: its rows are not all there
    config = read_run(root)["config"]
    why = not_a_models_answers(config)
    require(
        why is None,
        f"{root} {why}, so no lossless verdict applies. Check a run of the method itself on a real backend (e.g. "
        "engine.backend=vllm)",
    )
    sampler = asked or run_sampler(config, root / RUN_RECORD)
    model = config["model"]
    referee = Referee(model["path"], model.get("revision"))
    verdict = referee.score(sampled_rows(root), sampler).verdict()
    scored = referee.last
    assert scored is not None, "score() sets it"
    record = {
        "verdict": verdict.verdict,
        "why": verdict.why,
        "figures": verdict.figures,
        "sampler": asdict(sampler),
        "referee": {
            "model": model["path"],
            "dtype": "float32",
            "library": "transformers",
            "samples": scored.samples,
            "prompts": scored.prompts,
            "tokens": scored.tokens,
            "seconds": scored.seconds,
        },
        "machine": this_machine().line(),
    }
    path = result_path(root)
    plot_pit(record, path.with_name("pit.png"))
    atomic_write_text(path, json.dumps(record, indent=1, sort_keys=True) + "\n")
    log.info("lossless check of %s: %s (%s); written to %s", root, verdict.verdict, verdict.why, path)
    return record


def plot_pit(record: dict[str, Any], path: Path) -> Path:
    """The PIT's decile counts over every token against the band uniform draws would stay in (each decile's
    binomial count, two-sided at ALPHA / 10 per decile): bars outside it are what the chi-square saw."""
    plt = pyplot()
    counts = record["figures"]["pit_deciles"]
    n = sum(counts)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.bar([(i + 0.5) / BINS for i in range(BINS)], counts, width=0.9 / BINS, color="tab:blue")
    if n:
        low, high = stats.binom.interval(1 - ALPHA / BINS, n, 1 / BINS)
        ax.axhspan(
            low,
            high,
            color="tab:green",
            alpha=0.2,
            label=f"where uniform draws stay ({1 - ALPHA / BINS:.2%} per decile)",
        )
        ax.axhline(n / BINS, color="tab:green")
        ax.legend(fontsize="small")
    ax.set(xlabel="randomised PIT of each sampled token", ylabel="tokens", xlim=(0, 1))
    ax.set_title(f"{record['verdict']}: {n} tokens", fontsize="medium")
    return save_png(fig, plt, path)


def log_check(root: Path, record: dict[str, Any]) -> bool:
    """The verdict on the run's MLflow run(s): metrics ``lossless.*``, the tag ``lossless``, and lossless.json with
    the PIT plot as artifacts; False when the run has no MLflow run (tracking off, or not in its store)."""
    from specbatch.tracking.comparison import folder_run_ids

    root = Path(root).resolve()
    found = folder_run_ids([root]).get(root)
    if found is None:
        return False
    figures = record["figures"]
    metrics = {
        "lossless.tokens": figures["tokens"],
        "lossless.p_value": figures.get("p_value"),
        "lossless.detectable_temperature_error": figures.get("detectable_temperature_error"),
        "lossless.referee_seconds": record["referee"]["seconds"],
    }
    for run_id in found.run_ids:
        for key, value in metrics.items():
            if value is not None:
                found.client.log_metric(run_id, key, float(value))
        found.client.set_tag(run_id, "lossless", record["verdict"])
        found.client.log_artifact(run_id, str(result_path(root)), "lossless")
        found.client.log_artifact(run_id, str(result_path(root).with_name("pit.png")), "lossless")
    return True
