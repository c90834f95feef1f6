"""Run folders are deterministic: the same set-up finds its folder, a different one never shares it."""

from __future__ import annotations

from specbatch.run.folder import RunFolder, config_hash


def test_same_setup_same_folder_different_setup_different_folder(job_factory) -> None:
    base = RunFolder.for_job(job_factory())
    assert base == RunFolder.for_job(job_factory())
    assert base.root.parent.name == "smollm2-135m-instruct" and base.root.parent.parent.name == "humaneval_edit"
    assert base.root.name.startswith("ngram-k3-")
    others = {
        RunFolder.for_job(job_factory(*o)).root
        for o in (["spec.num_speculative_tokens=4"], ["spec=none"], ["sampling.max_tokens=32"], ["max_samples=3"])
    }
    assert base.root not in others and len(others) == 4
    # Where results are logged does not change what is generated.
    assert config_hash(job_factory()) == config_hash(job_factory("tracking=off"))


def test_run_name_replaces_the_readable_part(job_factory) -> None:
    layout = RunFolder.for_job(job_factory("run_name=repeat2"))
    assert layout.root.name.startswith("repeat2-")
    assert layout.part_path(12).name == "part-00012.parquet"
    assert layout.data_dir.name == "shard-00000-of-00001"
    assert layout.done_marker == layout.root / "done" / "shard-00000-of-00001"
