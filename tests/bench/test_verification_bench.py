"""jobs/bench.py --verification on a machine without a GPU: the report is the job's own refusal of block verification
(vLLM 0.32 verifies blocks only on its newer model runner, on a GPU), from a real run of the job, and the table of
block against standard is built from its runs' outcomes."""

from __future__ import annotations

from pathlib import Path

import pytest

from specbatch.bench.gpu_check import Case, Outcome
from specbatch.bench.verification_bench import table, verification_report
from specbatch.common.machine import this_machine


def test_without_a_gpu_the_report_is_the_refusal(tmp_path: Path) -> None:
    if this_machine().gpu_count:
        pytest.skip("this machine has a GPU: the bench runs the presets")
    report, path = verification_report(4, 4, tmp_path, "t")
    assert path.read_text() == report + "\n"
    assert "## (j) block against standard verification: needs a GPU" in report
    assert (
        "spec.rejection_sample_method=block: vLLM 0.32 verifies blocks only on its newer (V2) model runner" in report
    )


def test_the_table_sets_block_beside_standard() -> None:
    def outcome(mode: str, tokens: list[int], rate: float, al: float) -> Outcome:
        return Outcome(Case(mode, ()), tokens_per_second=rate, acceptance_length=al, completions={("r", 1, 0): tokens})

    lines = table(
        {
            "humaneval_edit": {"standard": outcome("s", [1, 2], 90.0, 2.5), "block": outcome("b", [1, 2], 99.5, 2.75)},
            "two-turn": {"standard": outcome("s", [1, 2], 80.0, 2.0), "block": Outcome(Case("b", ()), error="OOM")},
        }
    )
    assert lines[-4:] == [
        "| humaneval_edit | standard | 2.50 | 90.0 | - |",
        "| humaneval_edit | block | 2.75 | 99.5 | 1/1 |",
        "| two-turn | standard | 2.00 | 80.0 | - |",
        "| two-turn | block | failed: OOM | - | - |",
    ]
