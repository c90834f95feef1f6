"""Each backend's knobs are declared in its own folder (specbatch/backends/<name>/__init__.py), typed by users where
they always were (engine.url, model.gguf), refused on another backend in one line naming the backend that has them,
and recorded in the flat shape run.json files always had."""

from __future__ import annotations

import pickle

import pytest

from conftest import compose_job
from specbatch.analysis.report import recorded_job
from specbatch.backends.llama_cpp import Options as LlamaCppOptions
from specbatch.backends.server import server_options
from specbatch.backends.vllm import vllm_options
from specbatch.config import ConfigError, backend_names, run_folder_digest, to_plain_dict
from specbatch.config.engine import backend_options, knobs

# The engine section of every run.json written before the backends had folders (main at 5dfb33a).
RECORDED_ENGINE_KEYS = {
    "name",
    "backend",
    "enforce_eager",
    "cpu_kvcache_space_gib",
    "gpu_memory_utilization",
    "max_num_seqs",
    "seed",
    "warmup",
    "multiprocessing",
    "url",
    "api_key_env",
    "served_model",
    "api",
    "max_concurrency",
    "request_timeout_seconds",
    "retries",
    "llama_server",
    # the dummy's (engine.step_seconds: a job that lasts, without a model)
    "step_seconds",
}


def test_the_backends_are_found_from_their_folders() -> None:
    assert backend_names() == ("vllm", "server", "llama_cpp", "dummy")
    # sglang serves only: a folder without an engine is no engine.backend.
    with pytest.raises(ConfigError, match="engine.backend=sglang is not an engine"):
        compose_job(["engine.backend=sglang"])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["engine.max_concurrency=4"], "engine.max_concurrency=4 is a knob of engine.backend=server, not of engine."),
        (["engine.llama_server=/x"], "engine.llama_server=/x is a knob of engine.backend=llama_cpp, not of engine.ba"),
        (["model.gguf=/m.gguf"], "model.gguf=/m.gguf is a knob of engine.backend=llama_cpp, not of engine.backend="),
        (["engine.backend=server", "engine.multiprocessing=false"], "is a knob of engine.backend=vllm, not of engi"),
        (["engine.backend=dummy", "engine.url=http://h:1/v1"], "of engine.backend=vllm or engine.backend=server"),
        (["engine.backend=llama_cpp", "engine.api=chat"], "engine.api=chat is a knob of engine.backend=server, "),
    ],
)
def test_a_knob_of_another_backend_is_refused_naming_it(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        compose_job(overrides)


def test_each_backend_reads_its_knobs_as_its_own_options() -> None:
    served = compose_job(["engine.backend=server", "engine.url=http://h:9/v1", "engine.max_concurrency=3"])
    assert (server_options(served).url, server_options(served).max_concurrency) == ("http://h:9/v1", 3)
    job = compose_job(["engine.backend=llama_cpp", "model.gguf=/m.gguf", "engine.retries=0"])
    options = backend_options(job, LlamaCppOptions)
    assert (options.gguf, options.retries, options.draft_gguf) == ("/m.gguf", 0, None)
    # The engine presets' vLLM knobs (every backend's digests count them) are read the same way.
    assert vllm_options(compose_job(["engine.backend=dummy"])).cpu_kvcache_space_gib == 2
    assert knobs()["model.gguf"].owners == ("llama_cpp",)


def test_the_record_keeps_its_flat_shape_and_reads_back() -> None:
    for backend in backend_names():
        job = compose_job([f"engine.backend={backend}"])
        plain = to_plain_dict(job)
        assert set(plain["engine"]) == RECORDED_ENGINE_KEYS
        assert "gguf" in plain["model"] and "draft_gguf" in plain["spec"]
        # A run.json of it reads back as the same job (compare's serve command reads it so).
        back = recorded_job(plain)
        assert to_plain_dict(back) == plain and run_folder_digest(back) == run_folder_digest(job)
    # A record written with another backend's knob set (accepted before backends had folders) still reads.
    plain = to_plain_dict(compose_job([]))
    plain["engine"]["max_concurrency"] = 4
    assert recorded_job(plain).engine.backend == "vllm"


def test_a_job_crosses_processes_as_it_was() -> None:
    job = compose_job(["engine.backend=llama_cpp", "model.gguf=/m.gguf"])
    assert pickle.loads(pickle.dumps(job)) == job
