"""The server backend's logic: /metrics parsing, URLs, the checks before anything is written (no model here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import compose_job, run_generate
from mlflow_server import free_port
from specbatch.backends.server.server_check import server_root
from specbatch.backends.server.server_metrics import SpecCounters, parse_spec_counters
from specbatch.config import ConfigError

MODEL = 'model_name="/models/SmolLM2"'
# As vLLM 0.32's server writes it (two data-parallel engines, so every counter has two label sets).
PAGE = f"""
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{{engine="0",{MODEL}}} 200.0
vllm:spec_decode_num_drafts_total{{engine="1",{MODEL}}} 22.0
# HELP vllm:spec_decode_num_drafts_created Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_created gauge
vllm:spec_decode_num_drafts_created{{engine="0",{MODEL}}} 1.7953687784041345e+09
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{{engine="0",{MODEL}}} 600.0
vllm:spec_decode_num_draft_tokens_total{{engine="1",{MODEL}}} 62.0
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{{engine="0",{MODEL}}} 550.0
vllm:spec_decode_num_accepted_tokens_total{{engine="1",{MODEL}}} 46.0
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",{MODEL},position="0"}} 200.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",{MODEL},position="2"}} 170.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",{MODEL},position="1"}} 180.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="1",{MODEL},position="0"}} 10.0
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{{engine="0",{MODEL}}} 841.0
"""


def test_spec_counters_are_summed_over_label_sets_and_positions_ordered() -> None:
    assert parse_spec_counters(PAGE) == SpecCounters(
        drafts=222, draft_tokens=662, accepted_tokens=596, accepted_per_position=(210, 180, 170)
    )


def test_a_page_without_spec_counters_gives_none_not_zeros() -> None:
    # A server that does not speculate (or is not vLLM): "unknown", never "nothing accepted".
    assert (
        parse_spec_counters(
            f"# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total{{{MODEL}}} 9\n"
        )
        is None
    )
    assert parse_spec_counters("") is None


def test_health_and_metrics_live_at_the_servers_root() -> None:
    assert server_root("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000"
    assert server_root("https://gpu-node:8443/v1/") == "https://gpu-node:8443"
    assert server_root("http://frontend.local/v1?x=1") == "http://frontend.local"


def test_server_keys_are_checked_when_composed() -> None:
    with pytest.raises(ConfigError, match=r"engine.url='localhost:8000' is not an http\(s\) URL"):
        compose_job(["engine.backend=server", "engine.url=localhost:8000"])
    # A key variable whose name does not say "secret" would not be masked: refused, naming the key.
    with pytest.raises(ConfigError, match="engine.api_key_env=MY_VAR does not look like a secret"):
        compose_job(["engine.api_key_env=MY_VAR"])
    with pytest.raises(ConfigError, match="engine.max_concurrency=0 must be 1 or more"):
        compose_job(["engine.backend=server", "engine.max_concurrency=0"])
    with pytest.raises(ConfigError, match="engine.api=grpc is not one of auto, completions, chat"):
        compose_job(["engine.backend=server", "engine.api=grpc"])


def test_no_server_at_the_url_is_one_error_naming_it_before_anything_is_written(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    out = tmp_path / "outputs"
    result = run_generate(
        ["engine.backend=server", f"engine.url={url}", "engine.retries=0", f"output_root={out}", "max_samples=2"],
        timeout=300,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 2, output[-3000:]
    errors = [line for line in output.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and f"engine.url={url}: no OpenAI-compatible server answers there" in errors[0]
    assert "Connection refused" in errors[0] and "python jobs/serve.py" in errors[0]
    assert "Traceback" not in output
    # Not a run folder, not a lock, not an MLflow store.
    assert not (out / "runs").exists() and not (out / "mlflow.db").exists()
