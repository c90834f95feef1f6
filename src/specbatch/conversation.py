"""Generating every row of a batch, turn by turn, without letting one bad row take the others with it.

Turn 1 of every row is generated in one engine call, then turn 2 of the rows that have one (with the model's own
turn-1 answer in the conversation), and so on. Rows that cannot be asked (malformed, empty, too long, or whose
previous turn failed) become error rows and are never sent. If the engine rejects a whole batch, each prompt is
retried alone so only the guilty ones turn into error rows.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from specbatch.config import JobConfig
from specbatch.data import SourceRow
from specbatch.engine import Engine, sampling_params
from specbatch.prompts import Prompt, length_error, render
from specbatch.records import build_records, error_record
from specbatch.spec_metrics import Counters

log = logging.getLogger(__name__)


@dataclass
class BatchResult:
    records: list[dict[str, Any]] = field(default_factory=list)
    # Engine counter differences and wall seconds summed over the successful generate calls.
    counters: Counters = field(default_factory=Counters)
    seconds: float = 0.0


def generate_rows(engine: Engine, rows: list[SourceRow], job: JobConfig, tokenizer: Any) -> BatchResult:
    method, k = job.spec.method.value, job.spec.k
    params = sampling_params(job.sampling)
    result = BatchResult()
    answers: dict[str, list[str]] = {row.row_id: [] for row in rows}
    # row id -> (turn that failed, why); later turns of that row are recorded as errors, never asked.
    failed: dict[str, tuple[int, str]] = {}
    for turn in range(1, max((r.num_turns for r in rows), default=0) + 1):
        pending: list[Prompt] = []
        for row in (r for r in rows if r.num_turns >= turn):
            if row.error is not None:
                result.records.append(error_record(row.row_id, turn, row.category, row.error, method, k))
                continue
            if row.row_id in failed:
                failed_turn, why = failed[row.row_id]
                reason = f"turn {failed_turn} failed: {why}"
                result.records.append(error_record(row.row_id, turn, row.category, reason, method, k))
                continue
            prompt = render(row, turn, answers[row.row_id], job.dataset, tokenizer)
            problem = _prompt_problem(prompt, job)
            if problem:
                failed[row.row_id] = (turn, problem)
                result.records.append(error_record(row.row_id, turn, row.category, problem, method, k, prompt))
                continue
            pending.append(prompt)
        if not pending:
            continue
        log.info("turn %d: generating %d prompts with %s", turn, len(pending), job.spec.label)
        for prompt, output in zip(pending, _generate_isolating(engine, pending, params, result), strict=True):
            if isinstance(output, str):
                failed[prompt.row_id] = (turn, output)
                result.records.append(error_record(prompt.row_id, turn, prompt.category, output, method, k, prompt))
                continue
            result.records.extend(build_records(prompt, output, method, k))
            # Later turns continue the conversation with the first sample's answer.
            answers[prompt.row_id].append(output.outputs[0].text)
    return result


def _prompt_problem(prompt: Prompt, job: JobConfig) -> str | None:
    if not prompt.token_ids:
        return "empty prompt: it has no tokens"
    return length_error(prompt, job.sampling.max_tokens, job.model.max_model_len)


def _generate_isolating(engine: Engine, prompts: list[Prompt], params: Any, result: BatchResult) -> list[Any]:
    """Outputs in prompt order; a prompt the engine refused alone is returned as its error message (a str)."""
    try:
        gens = [engine.generate(prompts, params)]
    except Exception as exc:
        if len(prompts) == 1:
            raise
        log.warning(
            "a batch of %d prompts failed (%s: %s); retrying one at a time", len(prompts), type(exc).__name__, exc
        )
        outputs: list[Any] = []
        gens = []
        for prompt in prompts:
            try:
                gen = engine.generate([prompt], params)
            except Exception as single:
                outputs.append(f"generation failed: {type(single).__name__}: {single}")
                continue
            gens.append(gen)
            outputs.append(gen.outputs[0])
        if not gens:
            raise  # every prompt fails alone too: the engine is broken, not a row
        _add(result, gens)
        return outputs
    _add(result, gens)
    return gens[0].outputs


def _add(result: BatchResult, gens: list[Any]) -> None:
    for gen in gens:
        result.counters = result.counters + gen.counters
        result.seconds += gen.seconds
