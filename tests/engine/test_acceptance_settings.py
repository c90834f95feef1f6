"""What silently changes acceptance is recorded for every run: read from vLLM's resolved config and its workers,
kept in the launch record and the shard summary, logged as MLflow params, and compared by jobs/compare.py (logic
with stand-ins; tests/engine/test_methods_cpu.py reads them from a real engine)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

from conftest import fake_engine
from specbatch.analysis.compare import compare, settings_notes
from specbatch.analysis.run_data import load_run
from specbatch.backends.vllm.vllm_settings import resolved_settings
from specbatch.engine.acceptance_settings import (
    SETTINGS,
    as_params,
    differences,
    merged_settings,
)
from specbatch.pipeline import run_job
from specbatch.run.folder import RunFolder

CPU_SETTINGS = {
    "draft_max_model_len": 1024,
    "prefix_caching": True,
    "chunked_prefill": True,
    "async_scheduling": False,
    "structured_outputs": "off",
    "model_runner": "v1",
    "attention_backend": "CPU_ATTN",
}


def backend(name: str) -> Any:
    return SimpleNamespace(get_name=lambda: name)


def fake_llm(*, draft_len: int | None, backends: list[list[str]], runner_v2: bool = False) -> Any:
    """A started vllm.LLM as far as resolved_settings reads it: its VllmConfig and one worker's model runner."""
    draft = SimpleNamespace(max_model_len=draft_len) if draft_len else None
    config = SimpleNamespace(
        speculative_config=SimpleNamespace(draft_model_config=draft) if draft_len else None,
        cache_config=SimpleNamespace(enable_prefix_caching=True),
        scheduler_config=SimpleNamespace(enable_chunked_prefill=False, async_scheduling=True),
        use_v2_model_runner=runner_v2,
    )
    groups = [[SimpleNamespace(backend=backend(name)) for name in group] for group in backends]
    worker = SimpleNamespace(model_runner=SimpleNamespace(attn_groups=groups))
    return SimpleNamespace(
        llm_engine=SimpleNamespace(vllm_config=config), collective_rpc=lambda fn: [fn(worker), fn(worker)]
    )


def test_the_settings_are_what_vllm_resolved() -> None:
    settings = resolved_settings(fake_llm(draft_len=2048, backends=[["FLASH_ATTN"], ["FLASH_ATTN", "FLEX_ATTENTION"]]))
    assert list(settings) == list(SETTINGS)
    assert settings == {
        "draft_max_model_len": 2048,
        "prefix_caching": True,
        "chunked_prefill": False,
        "async_scheduling": True,
        "structured_outputs": "off",
        "model_runner": "v1",
        "attention_backend": "FLASH_ATTN,FLEX_ATTENTION",
    }
    baseline = resolved_settings(fake_llm(draft_len=None, backends=[["CPU_ATTN"]], runner_v2=True))
    assert baseline["draft_max_model_len"] is None and baseline["model_runner"] == "v2"


def test_an_unreadable_attention_backend_is_recorded_as_unknown(caplog: pytest.LogCaptureFixture) -> None:
    llm = fake_llm(draft_len=None, backends=[])

    def broken(fn: Any) -> list[Any]:
        raise RuntimeError("no workers")

    llm.collective_rpc = broken
    assert resolved_settings(llm)["attention_backend"] is None
    assert "could not read the attention backend" in caplog.text


def test_launches_and_shards_that_disagree_say_so() -> None:
    assert merged_settings([None, CPU_SETTINGS, CPU_SETTINGS]) == CPU_SETTINGS
    merged = merged_settings([CPU_SETTINGS, {**CPU_SETTINGS, "prefix_caching": False}])
    assert merged == {**CPU_SETTINGS, "prefix_caching": "True | False"}
    assert merged_settings([None, None]) is None
    assert as_params({"draft_max_model_len": None, "prefix_caching": True}) == {
        "acceptance_settings.draft_max_model_len": "none",
        "acceptance_settings.prefix_caching": "True",
    }


def test_differences_leave_out_what_a_run_did_not_record() -> None:
    none = {**CPU_SETTINGS, "draft_max_model_len": None}
    assert differences({"none": none, "dflash": CPU_SETTINGS, "old": None}) == {}
    differ = differences({"a": CPU_SETTINGS, "b": {**CPU_SETTINGS, "async_scheduling": True}})
    assert differ == {"async_scheduling": {"False": ["a"], "True": ["b"]}}


def test_a_run_records_its_settings_in_its_summary_and_mlflow_params(job_factory) -> None:
    job = job_factory("max_samples=3", "tracking.experiment=settings")
    engine = fake_engine(job)
    engine.acceptance_settings = CPU_SETTINGS
    run_job(job, engine=engine)
    folder = RunFolder.for_job(job)
    assert json.loads(folder.stats_path.read_text())["acceptance_settings"] == CPU_SETTINGS
    client = MlflowClient(tracking_uri=job.tracking.uri)
    [run] = client.search_runs([client.get_experiment_by_name("settings").experiment_id])
    params = run.data.params
    assert params["acceptance_settings.prefix_caching"] == "True"
    assert params["acceptance_settings.draft_max_model_len"] == "1024"
    assert params["acceptance_settings.attention_backend"] == "CPU_ATTN"
    assert params["spec.method"] == "ngram"  # beside the config's own params


def test_compare_warns_when_runs_side_by_side_differ_in_a_setting(
    job_factory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    roots = []
    for spec, prefix_caching in (("spec=none", True), ("spec=ngram", False)):
        job = job_factory(spec, "max_samples=3", "tracking=off")
        engine = fake_engine(job)
        engine.acceptance_settings = {**CPU_SETTINGS, "prefix_caching": prefix_caching}
        run_job(job, engine=engine)
        roots.append(RunFolder.for_job(job).root)
    runs = [load_run(root) for root in roots]
    # compare puts the two side by side (the baseline and n-gram of one workload) and says how they differ.
    [note] = [n for n in compare(runs).notes if "settings that change acceptance" in n]
    assert "differ in settings that change acceptance" in note
    assert f"prefix_caching: False in 1 run(s), e.g. {roots[1].name}" in note
    assert f"True in 1 run(s), e.g. {roots[0].name}" in note
    assert note in caplog.text
    # Alike settings (and runs that recorded none) give no warning.
    alike = [runs[0], runs[0]]
    assert settings_notes(alike) == []
