"""What a run shows in MLflow, secrets kept out of it, and faults around it — with a fake engine and a real sqlite
MLflow store (logic tests; the real-process versions are in test_faults_cpu.py and test_server_cpu.py)."""

from __future__ import annotations

import errno
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from mlflow.tracking import MlflowClient

from conftest import PROJECT_ROOT, fake_engine
from mlflow_server import basic_auth_proxy, free_port
from specbatch.common.machine import this_machine
from specbatch.common.masking import mask_data, mask_text
from specbatch.pipeline import run_job
from specbatch.run.folder import RunFolder
from specbatch.run.multirun import SweepJob

LOG_RUN = PROJECT_ROOT / "jobs" / "log_run.py"
HF_SECRET = "hf_SeCrEtVaLuE123456"
PASSWORD = "pw-Secret-789"


@pytest.fixture
def make_job(local_job_factory):
    return lambda *extra: local_job_factory(*extra, rows=4)


def only_run(uri: str, experiment: str):
    client = MlflowClient(uri)
    [run] = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    return client, run


def artifact_texts(client: MlflowClient, run_id: str, tmp_path: Path) -> dict[str, str]:
    folder = Path(client.download_artifacts(run_id, "", str(tmp_path / f"art-{run_id}")))
    return {
        str(p.relative_to(folder)): p.read_bytes().decode(errors="replace") for p in folder.rglob("*") if p.is_file()
    }


def test_the_run_page_has_a_name_description_dataset_table_and_grouped_experiment(make_job, tmp_path) -> None:
    job = make_job("repeat=2")
    result = run_job(job, engine=fake_engine(job))
    # Experiments group runs by data set by default: comparable runs sit together.
    assert job.tracking.experiment == "specbatch/local"
    client, run = only_run(job.tracking.uri, "specbatch/local")
    # Typed as model development, so MLflow's UI opens its runs table rather than the GenAI view.
    assert client.get_experiment_by_name("specbatch/local").tags["mlflow.experimentKind"] == "custom_model_development"
    # The test engine runs one request at a time (concurrency=1): the name takes the batch the engine reported.
    assert run.info.run_name == "none · bs1 · rep2 · smollm2-135m-instruct"
    assert (
        "**none** on" in run.data.tags["mlflow.note.content"]
        and str(result.folder.root) in (run.data.tags["mlflow.note.content"])
    )
    # The dtype that ran (model.dtype=auto resolved for this machine), never "auto"; and the machine it ran on.
    assert run.data.tags["repeat"] == "2" and run.data.tags["dtype"] == job.model.dtype.value != "auto"
    cores = str(len(os.sched_getaffinity(0)))
    assert run.data.tags["machine"] == this_machine().line() and run.data.tags["cpu_cores"] == cores
    [dataset_input] = run.inputs.dataset_inputs
    # Named by its data set (the runs table's Dataset column), not by the run folder.
    assert dataset_input.dataset.name == "local"
    assert str(result.folder.data_dir) in dataset_input.dataset.source
    assert {t.key: t.value for t in dataset_input.tags}["mlflow.data.context"] == "output"
    artifacts = artifact_texts(client, run.info.run_id, tmp_path)
    table = json.loads(artifacts["completions_sample.json"])
    assert table["columns"][:2] == ["row_id", "turn"] and len(table["data"]) == 4
    assert {"config.yaml", "summary.json"} <= set(artifacts)
    assert run.data.metrics["output_tokens"] == 8


URL_PASSWORD, URL_KEY = "url-pw-5531", "url-key-7720"


def test_secrets_reach_no_param_tag_artifact_or_parquet_metadata(make_job, tmp_path, monkeypatch, caplog) -> None:
    monkeypatch.setenv("HF_TOKEN", HF_SECRET)
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", PASSWORD)
    # A token pasted into the config, and a password in a URI given as a sweep override.
    # And credentials in engine.url (in no identity, but in the config that is written) behind an empty user name
    # and in the query.
    job = make_job(
        f"model.revision={HF_SECRET}",
        "tracking.experiment=secrets",
        f"engine.url='http://:{URL_PASSWORD}@127.0.0.1:9/v1?api_key={URL_KEY}'",
    )
    sweep = SweepJob(tmp_path / "sweep", None, {"dataset.path": f"https://user:{PASSWORD}@data.example/x.jsonl"})
    with caplog.at_level(logging.INFO):
        result = run_job(job, engine=fake_engine(job), sweep=sweep)
    client, run = only_run(job.tracking.uri, "secrets")
    written = [
        json.dumps(run.data.params),
        json.dumps(run.data.tags),
        *artifact_texts(client, run.info.run_id, tmp_path).values(),
        *(str(pq.read_schema(p).metadata) for p in result.parquet_files),
        result.folder.run_json.read_text(),
        result.folder.config_yaml.read_text(),
        caplog.text,
    ]
    for text in written:
        assert HF_SECRET not in text and PASSWORD not in text
        assert URL_PASSWORD not in text and URL_KEY not in text  # in no credential variable: masked by their place
    assert run.data.params["model.revision"] == "***"
    assert run.data.tags["override.dataset.path"] == "https://user:***@data.example/x.jsonl"


def test_masking_rules(monkeypatch) -> None:
    env = {"HF_TOKEN": HF_SECRET, "MY_SERVICE_API_KEY": "k-123456789", "SHORT_TOKEN": "1", "HOME": "/root/x"}
    assert mask_text(f"x {HF_SECRET} y k-123456789", env) == "x *** y ***"
    assert mask_text("http://u:p@ss@h:5000/a", {}) == "http://u:***@h:5000/a"
    # Any userinfo: a password behind an empty user name, a token as the user name; and credential query parameters.
    assert mask_text("engine.url=http://:pw-1@127.0.0.1:8000/v1", {}) == "engine.url=http://:***@127.0.0.1:8000/v1"
    assert mask_text("http\\://\\:pw-1@h/v1", {}) == "http\\://\\:***@h/v1"  # as Hydra's log lines escape it
    assert mask_text("http://tok-1@h/v1 and http://h/v1", {}) == "http://***@h/v1 and http://h/v1"
    assert mask_text("https://h/v1?api_key=a1&n=2&Token=b2#x", {}) == "https://h/v1?api_key=***&n=2&Token=***#x"
    assert mask_text("https://h/x?access_token=t;sig=s&page=3", {}) == "https://h/x?access_token=***;sig=***&page=3"
    assert mask_text("sqlite:////root/x/mlflow.db", env) == "sqlite:////root/x/mlflow.db"  # not a credential
    assert mask_data({"a": [f"t={HF_SECRET}", 3]}, env) == {"a": ["t=***", 3]}


def test_trust_remote_code_warns_and_is_tagged(make_job, caplog) -> None:
    job = make_job("model.trust_remote_code=true", "tracking.experiment=remote-code")
    with caplog.at_level(logging.WARNING):
        run_job(job, engine=fake_engine(job))
    assert "model.trust_remote_code=true" in caplog.text
    _, run = only_run(job.tracking.uri, "remote-code")
    assert run.data.tags["trust_remote_code"] == "true"
    assert make_job().model.trust_remote_code is False


@pytest.fixture
def quick_http_failure(monkeypatch) -> None:
    """The job sets MLflow's HTTP retry/timeout variables for its process; in this test process they must not
    outlive the test (later tests talk to a real server), so they are set here and restored afterwards."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")


def test_unreachable_server_warns_once_without_credentials_and_the_run_is_logged_later(
    make_job, tmp_path, caplog, quick_http_failure
) -> None:
    uri = f"http://admin:{PASSWORD}@127.0.0.1:9"  # port 9 (discard): nothing listens
    job = make_job(f"tracking.uri={uri}")
    with caplog.at_level(logging.WARNING):
        result = run_job(job, engine=fake_engine(job))
    assert result.folder.done_marker.exists() and len(result.parquet_files) == 2
    warnings = [r for r in caplog.records if "MLflow tracking at" in r.getMessage()]
    assert len(warnings) == 1
    assert "http://admin:***@127.0.0.1:9" in warnings[0].getMessage() and PASSWORD not in caplog.text
    pending = json.loads(result.folder.mlflow_pending_path.read_text())
    assert pending["run_id"] is None and "starting the run" in pending["failure"]

    store = f"sqlite:///{tmp_path}/later.db"
    proc = subprocess.run(
        [sys.executable, str(LOG_RUN), str(result.folder.root), "--tracking-uri", store],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not result.folder.mlflow_pending_path.exists()
    client, run = only_run(store, "specbatch/local")
    assert run.info.status == "FINISHED" and run.data.tags["logged_later"] == "true"
    assert run.data.metrics["output_tokens"] == 8 and run.data.params["spec.method"] == "none"


def test_a_full_disk_leaves_no_half_file_fails_the_run_and_a_rerun_finishes(make_job, monkeypatch) -> None:
    job = make_job("tracking.experiment=disk-full")
    real_write = pq.write_table
    calls = []

    def write_until_full(table, where, *args, **kwargs):
        calls.append(where)
        if len(calls) == 2:
            Path(where).write_bytes(b"PAR1 half a file")
            raise OSError(errno.ENOSPC, "No space left on device", str(where))
        return real_write(table, where, *args, **kwargs)

    monkeypatch.setattr(pq, "write_table", write_until_full)
    with pytest.raises(OSError, match="No space left on device"):
        run_job(job, engine=fake_engine(job))
    layout = RunFolder.for_job(job)
    assert [p.name for p in layout.data_dir.iterdir()] == ["part-00000.parquet"]
    assert not layout.done_marker.exists()
    _, run = only_run(job.tracking.uri, "disk-full")
    assert run.info.status == "FAILED"

    monkeypatch.setattr(pq, "write_table", real_write)
    engine = fake_engine(job)
    result = run_job(job, engine=engine)
    assert len(engine.added) == 2 and result.summary.rows == 4 and result.folder.done_marker.exists()


def test_a_sweep_whose_server_is_down_still_runs_its_jobs(tmp_path, caplog, quick_http_failure) -> None:
    from hydra import compose, initialize_config_dir
    from omegaconf import open_dict

    from conftest import CONF_DIR
    from specbatch.run.multirun import read_sweep
    from specbatch.tracking.sweep import MlflowSweepCallback

    overrides = [f"tracking.uri=http://admin:{PASSWORD}@127.0.0.1:9"]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides, return_hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.sweep.dir = str(tmp_path / "sweep")
    callback = MlflowSweepCallback()
    with caplog.at_level(logging.WARNING):
        callback.on_multirun_start(cfg)
        callback.on_multirun_end(cfg)
    assert read_sweep(tmp_path / "sweep")["parent_run_id"] is None
    assert "sweep: no MLflow parent run" in caplog.text and "admin:***@" in caplog.text
    assert PASSWORD not in caplog.text


def test_log_run_takes_the_password_of_a_masked_uri_from_mlflow_tracking_password(
    make_job, mlflow_server, quick_http_failure, monkeypatch
) -> None:
    """run.json keeps tracking.uri as http://admin:***@...; the README says to give the password back in
    MLFLOW_TRACKING_PASSWORD. The server here refuses requests without exactly admin/PASSWORD."""
    port = free_port()
    job = make_job(f"tracking.uri=http://admin:{PASSWORD}@127.0.0.1:{port}")  # nothing listens there yet
    result = run_job(job, engine=fake_engine(job))
    recorded = json.loads(result.folder.run_json.read_text())["config"]["tracking"]["uri"]
    assert recorded == f"http://admin:***@127.0.0.1:{port}" and result.folder.mlflow_pending_path.exists()

    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "MLFLOW_TRACKING_USERNAME")}
    env["MLFLOW_TRACKING_PASSWORD"] = PASSWORD
    with basic_auth_proxy(mlflow_server.uri, "admin", PASSWORD, port=port) as proxy:
        proc = subprocess.run(
            [sys.executable, str(LOG_RUN), str(result.folder.root)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proxy.passed > 0 and proxy.refused == 0 and PASSWORD not in proc.stdout + proc.stderr
    assert not result.folder.mlflow_pending_path.exists()
    client, run = only_run(mlflow_server.uri, "specbatch/local")
    assert run.info.status == "FINISHED" and run.data.tags["logged_later"] == "true"
    assert run.data.params["tracking.uri"] == f"http://admin:***@127.0.0.1:{port}"
