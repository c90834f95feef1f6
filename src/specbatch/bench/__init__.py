"""Benchmarks (not tests) behind jobs/bench*.py: the job against a bare vLLM script, speculation's speedups, keeping
the engine full, memory as the data set grows, and every method on the same prompts. Each returns its report as
text; the job scripts parse arguments and print it."""

from specbatch.common.machine import this_machine


def machine_header() -> str:
    """The line every report starts its figures with: ratios from two machines are not comparable."""
    return f"machine: {this_machine().line()}"
