"""A vLLM server's speculative-decoding counters, read from its Prometheus ``/metrics`` page.

The names are those of ``LLM.get_metrics()`` (backends.vllm.vllm_offline) with Prometheus' ``_total`` suffix on
each sample; every counter is summed over its label sets (``engine``, ``model_name``; one per data-parallel engine).
They are cumulative over the server's life and count every client's requests: only the difference of two snapshots
around a shard means anything, and only when the job was the server's only client meanwhile.

Parsing is Prometheus' own (``prometheus_client.parser``), not a regular expression of ours.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from specbatch.backends.vllm.vllm_offline import ACCEPTED_PER_POS, NUM_ACCEPTED, NUM_DRAFT_TOKENS, NUM_DRAFTS


@dataclass(frozen=True)
class SpecCounters:
    """The spec-decode counters of one ``/metrics`` page (absent on servers that do not speculate or export them)."""

    drafts: int
    draft_tokens: int
    accepted_tokens: int
    accepted_per_position: tuple[int, ...]


def parse_spec_counters(page: str) -> SpecCounters | None:
    """The page's spec-decode counters, or None when it has none (a server without speculation, or not vLLM)."""
    totals = {NUM_DRAFTS: 0.0, NUM_DRAFT_TOKENS: 0.0, NUM_ACCEPTED: 0.0}
    per_position: dict[int, float] = {}
    seen = False
    for family in text_string_to_metric_families(page):
        for sample in family.samples:
            # Counters come as <name>_total (plus <name>_created, which is a timestamp and not a count).
            if not sample.name.endswith("_total"):
                continue
            name = sample.name.removesuffix("_total")
            if name in totals:
                totals[name] += sample.value
                seen = True
            elif name == ACCEPTED_PER_POS and "position" in sample.labels:
                position = int(sample.labels["position"])
                per_position[position] = per_position.get(position, 0.0) + sample.value
    if not seen:
        return None
    positions = tuple(int(per_position.get(i, 0.0)) for i in range(max(per_position, default=-1) + 1))
    return SpecCounters(
        drafts=int(totals[NUM_DRAFTS]),
        draft_tokens=int(totals[NUM_DRAFT_TOKENS]),
        accepted_tokens=int(totals[NUM_ACCEPTED]),
        accepted_per_position=positions,
    )
