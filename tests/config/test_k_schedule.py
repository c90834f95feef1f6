"""spec.k_schedule (a k per batch size): checked when the config is composed, before any model loads, each refusal
naming the key and the fix; what it gives vLLM; the labels and digests it makes."""

from __future__ import annotations

import pytest

from conftest import compose_job, run_generate
from specbatch.backends.vllm.vllm_args import llm_kwargs, speculative_config
from specbatch.config import METHODS, ConfigError, SpecMethod, run_folder_digest
from specbatch.config.spec import SCHEDULE_EXAMPLE
from specbatch.run.folder import RunFolder

EXAMPLE = "spec.k_schedule=[[1,4,5],[5,16,3],[17,256,0]]"


def test_a_schedule_reaches_vllm_and_sets_k_to_its_largest() -> None:
    job = compose_job([EXAMPLE])
    # k comes from the schedule (vLLM caps each k of it at num_speculative_tokens): the preset's k=3 is replaced.
    assert job.spec.num_speculative_tokens == 5
    assert llm_kwargs(job)["speculative_config"] == {
        "method": "ngram",
        "num_speculative_tokens": 5,
        "prompt_lookup_min": 2,
        "prompt_lookup_max": 4,
        "num_speculative_tokens_per_batch_size": [[1, 4, 5], [5, 16, 3], [17, 256, 0]],
    }
    assert job.spec.label == "ngram-sched-1to4k5-5to16k3-17to256k0"
    assert job.spec.caption == "ngram k schedule 1-4:5 5-16:3 17-256:0"
    assert EXAMPLE == SCHEDULE_EXAMPLE, "the example in the messages is the one tested here"


def test_vllm_reads_the_schedule_we_pass_as_meant() -> None:
    """vLLM's own validator and lookup (what its scheduler runs on) take our output unchanged."""
    from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup

    job = compose_job([EXAMPLE, "engine.max_num_seqs=32"])
    spec = speculative_config(job.spec)
    assert spec is not None
    dense = build_dynamic_sd_schedule_lookup(
        spec["num_speculative_tokens_per_batch_size"], job.engine.max_num_seqs, spec["num_speculative_tokens"]
    )
    assert dense[1:] == [5] * 4 + [3] * 12 + [0] * 16


def test_a_fixed_k_is_unchanged_and_keeps_its_folder() -> None:
    job = compose_job([])
    assert job.spec.k_schedule is None and "num_speculative_tokens_per_batch_size" not in speculative_config(job.spec)
    # Null is in no digest (tests/config/test_identity.py checks the digests equal the rules from before it).
    scheduled = compose_job(["spec.k_schedule=[[1,256,3]]"])
    assert scheduled.spec.k == job.spec.k and run_folder_digest(scheduled) != run_folder_digest(job)


def test_max_num_seqs_decides_how_far_a_schedule_must_reach() -> None:
    assert compose_job(["spec.k_schedule=[[1,4,5],[5,16,3]]", "engine.max_num_seqs=16"]).spec.k == 5
    # Beyond the batch is fine (vLLM never looks there); null covers vLLM's CPU default of 256 per worker.
    assert compose_job(["spec.k_schedule=[[1,4,5],[5,999,3]]", "engine.max_num_seqs=16"]).spec.k == 5
    assert compose_job(["spec.k_schedule=[[1,256,2]]"]).spec.k == 2


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        # Shape and types.
        (["spec.k_schedule=[1,4,5]"], r"spec.k_schedule\[0\]=1 is not a \[first batch size, last batch size, k\]"),
        (["spec.k_schedule=[[1,4,x]]"], r"spec.k_schedule\[0\]=\[1, 4, 'x'\] is not a .* triple of integers"),
        (["spec.k_schedule=[[1,4]]"], r"spec.k_schedule\[0\]=\[1, 4\] is not a .* triple"),
        (["spec.k_schedule=[[1,4,true]]"], r"triple of integers: write a list of"),
        (["spec.k_schedule=[]"], r"spec.k_schedule=\[\] is not a list of .* \(or null for one k"),
        # Ranges.
        (["spec.k_schedule=[[1,0,3]]"], r"spec.k_schedule\[0\]=\[1,0,3\]: .* empty range; write first <= last"),
        (
            ["spec.k_schedule=[[2,4,5]]", "engine.max_num_seqs=4"],
            r"leaves batch sizes 1..1 without a k: the first range starts at 1 .*; write \[1,4,5\]",
        ),
        (
            ["spec.k_schedule=[[1,4,5],[4,16,3]]", "engine.max_num_seqs=16"],
            r"spec.k_schedule\[1\]=\[4,16,3\] overlaps spec.k_schedule\[0\]=\[1, 4, 5\]: .* start it at 5",
        ),
        (
            ["spec.k_schedule=[[1,4,5],[6,16,3]]", "engine.max_num_seqs=16"],
            r"spec.k_schedule\[1\]=\[6,16,3\] leaves batch sizes 5..5 without a k: .*; write \[5,16,3\]",
        ),
        (
            ["spec.k_schedule=[[5,16,3],[1,4,5]]", "engine.max_num_seqs=16"],
            r"spec.k_schedule's ranges are not in ascending order: sort them, e.g. \[\[1,4,5\],\[5,16,3\]\]",
        ),
        # Coverage of the batch the engine may run.
        (
            ["spec.k_schedule=[[1,4,5],[5,8,3]]", "engine.max_num_seqs=16"],
            r"spec.k_schedule ends at batch size 8 but engine.max_num_seqs=16 .*: extend its last range to 16 "
            r"\(\[5,16,3\], or add \[9,16,<k>\]\) or set engine.max_num_seqs=8",
        ),
        (
            ["spec.k_schedule=[[1,4,5],[5,16,3]]"],
            r"spec.k_schedule ends at batch size 16 but engine.max_num_seqs is null, so vLLM's CPU build runs up to "
            r"256 requests .*: extend its last range to 256",
        ),
        (
            ["engine=gpu", "spec.k_schedule=[[1,256,2]]"],
            r"engine.max_num_seqs is null, so vLLM runs up to 1024 .*: extend its last range to 1024",
        ),
        # k.
        (["spec.k_schedule=[[1,256,17]]"], r"spec.k_schedule\[0\]=\[1,256,17\]: k=17 is out of range: use 0 .* to 16"),
        (["spec.k_schedule=[[1,256,-1]]"], r"k=-1 is out of range"),
        (["spec.k_schedule=[[1,256,0]]"], r"spec.k_schedule has k=0 at every batch size, .*: use spec=none"),
        # Methods.
        (
            ["spec=none", "spec.k_schedule=[[1,256,2]]"],
            r"spec.k_schedule is set but spec.method=none drafts nothing: drop spec.k_schedule or choose a method",
        ),
    ],
)
def test_impossible_schedules_name_the_key_and_fix(overrides: list[str], expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        compose_job(overrides)


def test_methods_vllm_does_not_follow_a_schedule_for_are_refused_with_the_reason() -> None:
    refused = {m: e.k_schedule_refusal for m, e in METHODS.items() if e.k_schedule_refusal}
    assert SpecMethod.ngram not in refused
    for method, reason in refused.items():
        overrides = [f"spec={method.value}", "spec.k_schedule=[[1,1,2],[2,256,1]]"]
        if method in (SpecMethod.draft_model, SpecMethod.eagle, SpecMethod.eagle3):
            overrides.insert(0, "model=tiny_llama")
        if method is SpecMethod.mtp:
            overrides.insert(0, "model=tiny_mimo")
        with pytest.raises(ConfigError) as caught:
            compose_job(overrides)
        message = str(caught.value)
        assert f"spec.k_schedule is not followed for spec.method={method.value}: {reason}" in message
        assert "set one spec.num_speculative_tokens, or use a method that follows schedules (ngram" in message


def test_cli_bad_schedule_is_one_clear_line_before_any_model(tmp_path) -> None:
    result = run_generate([f"output_root={tmp_path}", "spec.k_schedule=[[1,4,5],[6,256,3]]"], timeout=120)
    assert result.returncode == 2
    assert "spec.k_schedule[1]=[6,256,3] leaves batch sizes 5..5 without a k" in result.stderr + result.stdout
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists()


def test_a_schedule_with_huge_numbers_keeps_a_readable_label_that_fits_a_folder_name() -> None:
    # A 250-digit batch size made a 270-character label, so the run folder's name was too long to be made.
    huge = 10**250 - 1
    job = compose_job([f"spec.k_schedule=[[1,4,5],[5,{huge},3]]"])
    assert job.spec.label == "ngram-sched-1to4k5-5to9e249k3"
    assert len(RunFolder.for_job(job).root.name) < 64
    # A label that fits is never changed: it names existing run folders and seeds their samples.
    assert compose_job(["spec.k_schedule=[[1,4,5],[5,99999999,3]]"]).spec.label == "ngram-sched-1to4k5-5to99999999k3"
