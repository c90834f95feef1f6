"""The llama_cpp backend's logic: how the real conf/ maps onto llama-server, what is refused before it starts, the
per-request figures, summaries without drafting steps, and the cross-engine table."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from conftest import compose_job, run_generate
from specbatch.analysis.compare import CompareRow, Comparison, tokens_per_pass
from specbatch.analysis.tables import cross_engine_table
from specbatch.backends.llama_cpp.llama_cpp import check_llama_cpp, timings_figures
from specbatch.backends.llama_cpp.llama_server import server_argv, spec_flags, target_gguf
from specbatch.config import ConfigError
from specbatch.run.summary import RowTotals, summarize

LLAMA = ["engine.backend=llama_cpp"]


def test_ngram_maps_onto_ngram_simple_with_the_lookup_capped_at_k() -> None:
    # ngram-simple drafts nothing when fewer than size-n tokens follow the match, so n may not exceed k.
    assert spec_flags(compose_job([*LLAMA, "spec=ngram", "spec.num_speculative_tokens=5"])) == [
        "--spec-type",
        "ngram-simple",
        "--spec-ngram-simple-size-n",
        "4",
        "--spec-ngram-simple-size-m",
        "5",
    ]
    flags = spec_flags(compose_job([*LLAMA, "spec=ngram", "spec.num_speculative_tokens=2"]))
    assert flags[flags.index("--spec-ngram-simple-size-n") + 1] == "2"
    assert spec_flags(compose_job([*LLAMA, "spec=none"])) == []


def test_the_argv_has_one_slot_per_sequence_and_their_context(tmp_path: Path) -> None:
    job = compose_job([*LLAMA, "spec=none", "engine.max_num_seqs=8", "model.max_model_len=1024"])
    argv = server_argv(job, Path("/bin/llama-server"), Path("/m.gguf"), [], 4321)
    assert argv[argv.index("-np") + 1] == "8" and argv[argv.index("-c") + 1] == str(8 * 1024)
    assert argv[argv.index("--host") + 1] == "127.0.0.1" and argv[argv.index("--port") + 1] == "4321"
    default = compose_job([*LLAMA, "spec=none"])
    argv = server_argv(default, Path("b"), Path("m"), [], 1)
    assert argv[argv.index("-np") + 1] == "4", "llama-server's own default"


def test_a_llama_server_that_is_not_executable_is_named(tmp_path: Path) -> None:
    # Not "Permission denied ... fix the cause (e.g. free disk space)" once the job tries to start it.
    binary = tmp_path / "llama-server"
    binary.write_text("#!/bin/sh\n")
    with pytest.raises(ConfigError, match=r"engine.llama_server=.*llama-server is not executable: chmod \+x it"):
        check_llama_cpp(compose_job([*LLAMA, "spec=none", f"engine.llama_server={binary}"]))


def test_draft_model_takes_a_gguf_draft(tmp_path: Path) -> None:
    # The embedded model has no draft_model preset: on llama.cpp spec.model is not needed, the GGUF draft is.
    base = [*LLAMA, "spec=draft_model", "spec.num_speculative_tokens=4"]
    with pytest.raises(ConfigError, match=r"spec\.draft_gguf=/path/to/draft\.gguf"):
        spec_flags(compose_job(base))
    with pytest.raises(ConfigError, match=r"spec\.draft_gguf=.*missing\.gguf is not a file"):
        spec_flags(compose_job([*base, f"spec.draft_gguf={tmp_path / 'missing.gguf'}"]))
    draft = tmp_path / "draft.gguf"
    draft.write_bytes(b"GGUF")
    flags = spec_flags(compose_job([*base, f"spec.draft_gguf={draft}"]))
    assert flags == ["--spec-type", "draft-simple", "-md", str(draft), "--spec-draft-n-max", "4"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["spec=eagle3", "model=tiny_llama"], r"spec\.method=eagle3 is not available on engine\.backend=llama_cpp"),
        (["spec=suffix"], r"spec\.method=suffix is not available .*llama\.cpp runs spec=ngram"),
        (["spec=ngram", "spec.k_schedule=[[1,2,3],[3,256,1]]"], r"drop spec\.k_schedule on engine\.backend"),
        (["spec=none", "model=tiny_llama"], r"set model\.gguf=/path/to/tiny-llama\.gguf"),
        (["spec=none", "engine.llama_server=/nowhere/llama-server"], r"engine\.llama_server=/nowhere/llama-server"),
    ],
)
def test_what_llama_cpp_cannot_run_is_one_error_naming_the_key(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check_llama_cpp(compose_job([*LLAMA, *overrides]))


def test_the_embedded_model_runs_its_own_gguf_and_model_gguf_wins(tmp_path: Path) -> None:
    assert target_gguf(compose_job(LLAMA)).name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    mine = tmp_path / "mine.gguf"
    mine.write_bytes(b"GGUF")
    assert target_gguf(compose_job([*LLAMA, f"model.gguf={mine}"])) == mine
    with pytest.raises(ConfigError, match="model.gguf=.*nope.gguf is not a file"):
        target_gguf(compose_job([*LLAMA, f"model.gguf={tmp_path / 'nope.gguf'}"]))


def test_an_unsupported_method_is_refused_by_the_job_before_anything_starts(tmp_path: Path) -> None:
    out = tmp_path / "outputs"
    result = run_generate([*LLAMA, "spec=suffix", f"output_root={out}", "max_samples=2"], timeout=300)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "spec.method=suffix is not available on engine.backend=llama_cpp" in result.stdout + result.stderr
    assert not (out / "runs").exists() and not (out / "_serve").exists(), "nothing written, no server started"


def test_timings_give_drafted_and_accepted_tokens_and_no_steps() -> None:
    figures = timings_figures({"predicted_n": 30, "draft_n": 11, "draft_n_accepted": 9})
    assert figures is not None
    assert (figures.draft_tokens, figures.accepted_tokens) == (11, 9)
    assert figures.spec_steps is None and figures.acceptance_length is None and figures.acceptance_histogram is None
    nothing_drafted = timings_figures({"predicted_n": 5})
    assert nothing_drafted is not None and nothing_drafted.draft_tokens == 0
    assert timings_figures(None) is None
    counters = figures.counters()
    assert (counters.drafts, counters.draft_tokens, counters.accepted_tokens) == (0, 11, 9)


def test_a_summary_without_drafting_steps_has_acceptance_but_no_al() -> None:
    figures = timings_figures({"draft_n": 20, "draft_n_accepted": 15})
    assert figures is not None
    delta = replace(figures.counters(), prompt_tokens=50, generation_tokens=40)
    rows = [{"status": "ok", "category": "a", "completion_tokens": 40, "spec_steps": None, "draft_tokens": 20}]
    rows[0]["accepted_tokens"] = 15
    summary = summarize(
        delta,
        method="ngram",
        k=3,
        totals=RowTotals.of(rows, by_category=True),
        generation_seconds=1.0,
        engine_startup_seconds=0.0,
        warmup_seconds=0.0,
    )
    assert summary.draft_acceptance_rate == 0.75 and summary.draft_tokens == 20
    assert summary.mean_acceptance_length is None and summary.drafts is None
    assert summary.accepted_per_position is None and summary.acceptance_rate_per_position is None
    assert summary.per_category is not None and summary.per_category["a"]["mean_acceptance_length"] is None
    assert tokens_per_pass(40, 15) == 40 / 25


def _row(engine: str, method: str, tok_s: float, key: str = "same prompts") -> CompareRow:
    return CompareRow(
        model="m",
        dataset="d",
        dtype="gguf" if engine == "llama_cpp" else "bfloat16",
        workload=engine,
        batch_size=4,
        method=method,
        k=None if method == "none" else 3,
        repeats=1,
        output_tokens_per_second=tok_s,
        output_tokens_per_second_std=0.0,
        output_tokens_per_second_min=tok_s,
        output_tokens_per_second_max=tok_s,
        speedup=tok_s / 100,
        speedup_min=None,
        speedup_max=None,
        mean_acceptance_length=None if engine == "llama_cpp" or method == "none" else 2.5,
        draft_acceptance_rate=None if method == "none" else 0.8,
        acceptance_rate_per_position=None,
        rows_compared=0,
        identical_rows=0,
        identical_share=None,
        first_differences=[],
        engine=engine,
        prompts_key=key,
        tokens_per_pass=1.0 if method == "none" else 2.0,
    )


def test_the_cross_engine_table_lines_up_engines_on_the_same_prompts() -> None:
    rows = [_row("vllm", "none", 100), _row("vllm", "ngram", 150), _row("llama_cpp", "none", 100)]
    rows.append(_row("llama_cpp", "ngram", 104))
    rows.append(_row("vllm", "none", 90, key="other prompts"))  # no other engine on these: not in the table
    lines = cross_engine_table(Comparison(rows, [], [], [], [], []))
    table = [line for line in lines if line.startswith("| m |")]
    assert len(table) == 4
    assert table[-1] == "| m | d | 4 | ngram | 3 | vllm | bfloat16 | 150.0 | 1.50 | 2.50 | 2.00 | 0.800 |"
    assert table[-2] == "| m | d | 4 | ngram | 3 | llama_cpp | gguf | 104.0 | 1.04 | - | 2.00 | 0.800 |"
    assert cross_engine_table(Comparison(rows[:2], [], [], [], [], [])) == [], "one engine: no table"
