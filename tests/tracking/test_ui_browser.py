"""The review experience for real: the job logs to a real ``mlflow server``, and headless chromium renders the run.

The MLflow UI is a single-page app: the run page's HTML is an empty shell until its JavaScript has fetched the run
over the REST API, so only a browser shows whether a reviewer actually sees the run name and its metrics.
Chromium comes from Debian (``bash jobs/browser.sh install``, which ``make test`` runs); without it these tests
fail rather than skip, so a machine that cannot check the UI never reports it as checked.

Keeps the rendered DOM and a screenshot in ``outputs/test-artifacts/`` for a human to look at.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow.entities import Run
from mlflow.tracking import MlflowClient

from conftest import PNG_MAGIC, PROJECT_ROOT, run_generate
from mlflow_server import MlflowServer, start_mlflow_server

pytestmark = pytest.mark.slow

EXPERIMENT = "ui-check"
RUN_NAME = "ngram-k3 · bs2 · smollm2-135m-instruct"
ARTIFACTS = PROJECT_ROOT / "outputs" / "test-artifacts"
# Virtual time (ms) the page may use after the network goes idle; chromium skips ahead through it, so a generous
# budget costs little wall time but lets the app's delayed renders (data fetches chained on timers) finish.
BUDGETS_MS = (20_000, 60_000, 120_000)


def chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        pytest.fail("chromium is missing: run `bash jobs/browser.sh install` (make test does it on its own)")
    return path


def run_chromium(url: str, action: list[str], profile: Path, budget_ms: int) -> subprocess.CompletedProcess[str]:
    """One headless chromium call on ``url``; ``action`` is ``--dump-dom`` or ``--screenshot=...``."""
    command = [
        chromium(),
        "--headless=new",
        # Root in a container has no user namespaces for chromium's sandbox; the page is our own local server.
        "--no-sandbox",
        "--disable-gpu",
        # A fresh profile per test: no first-run state or lock shared with another chromium on the machine.
        f"--user-data-dir={profile}",
        "--window-size=1600,1200",
        f"--virtual-time-budget={budget_ms}",
        *action,
        url,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=180)


def visible_text(dom: str) -> str:
    """The page's text, one DOM text node per line, without scripts and styles."""
    dom = re.sub(r"<(script|style)\b[^>]*>.*?</\1>", "", dom, flags=re.S | re.I)
    nodes = (html.unescape(node).strip() for node in re.split(r"<[^>]+>", dom))
    return "\n".join(node for node in nodes if node)


def run_url(server: MlflowServer, run: Run, tab: str = "") -> str:
    return f"{server.uri}/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}{tab}"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    """One server for the module: the job runs once, every test reads the same run."""
    with start_mlflow_server(tmp_path_factory.mktemp("ui-server")) as started:
        yield started


@pytest.fixture(scope="module")
def finished_run(server: MlflowServer, tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The real job (embedded model, n-gram, 2 prompts) logging to the server, as a user would point it there."""
    root = tmp_path_factory.mktemp("ui-job")
    result = run_generate(
        [
            f"output_root={root}",
            "max_samples=2",
            "model.dtype=float32",
            "sampling.max_tokens=32",
            f"tracking.uri={server.uri}",
            f"tracking.experiment={EXPERIMENT}",
        ],
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    client = MlflowClient(tracking_uri=server.uri)
    experiment = client.get_experiment_by_name(EXPERIMENT)
    assert experiment is not None, f"the job created no experiment {EXPERIMENT!r} on {server.uri}"
    runs = client.search_runs([experiment.experiment_id])
    assert [r.info.run_name for r in runs] == [RUN_NAME]
    return runs[0]


@pytest.fixture(scope="module")
def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


def test_run_is_logged_through_the_server(finished_run: Run, server: MlflowServer, tmp_path: Path) -> None:
    assert finished_run.info.status == "FINISHED"
    assert finished_run.data.tags["method"] == "ngram" and finished_run.data.tags["k"] == "3"
    assert finished_run.data.metrics["mean_acceptance_length"] >= 1
    assert finished_run.data.metrics["output_tokens_per_second"] > 0
    # The artifacts went up over HTTP (mlflow-artifacts:/) and landed in the server's own destination folder.
    assert finished_run.info.artifact_uri.startswith("mlflow-artifacts:/")
    client = MlflowClient(tracking_uri=server.uri)
    assert {"config.yaml", "summary.json"} <= {a.path for a in client.list_artifacts(finished_run.info.run_id)}
    stored = list((server.workdir / "artifacts").rglob("summary.json"))
    assert len(stored) == 1, f"summary.json not in the server's artifacts folder: {stored}"
    local = client.download_artifacts(finished_run.info.run_id, "summary.json", str(tmp_path))
    summary = json.loads(Path(local).read_text())
    assert summary["mean_acceptance_length"] == pytest.approx(finished_run.data.metrics["mean_acceptance_length"])


def render(url: str, profile: Path, must_show: list[str]) -> tuple[str, str]:
    """The DOM of ``url`` once it shows every string in ``must_show`` (retried with a longer budget), and its text."""
    dom = text = ""
    for budget in BUDGETS_MS:
        result = run_chromium(url, ["--dump-dom"], profile, budget)
        assert result.returncode == 0, f"chromium failed on {url}: {result.stderr[-3000:]}"
        dom = result.stdout
        text = visible_text(dom)
        if all(s in text for s in must_show):
            break
    return dom, text


def test_run_page_shows_name_and_metrics(
    finished_run: Run, server: MlflowServer, tmp_path: Path, artifacts_dir: Path
) -> None:
    metrics = finished_run.data.metrics
    url = run_url(server, finished_run)
    dom, text = render(url, tmp_path / "profile", [RUN_NAME, "mean_acceptance_length"])
    (artifacts_dir / "ui-run.html").write_text(dom)
    shown = f"page text of {url} (DOM kept in {artifacts_dir / 'ui-run.html'}):\n{text[:3000]}"
    assert RUN_NAME in text, shown
    lines = text.splitlines()
    for name in ("mean_acceptance_length", "output_tokens_per_second"):
        assert name in lines, shown
        # The overview's metrics table puts each value in the cell right after its name, as logged (full repr).
        assert lines[lines.index(name) + 1] == repr(metrics[name]), shown
    assert f"Metrics ({len(metrics)})" in lines, shown
    assert lines[lines.index("Status") + 1] == "Finished", shown
    # Tags render as a name chip followed by ": value".
    assert lines[lines.index("method") + 1] == ": ngram" and lines[lines.index("k") + 1] == ": 3", shown
    # The description is Markdown ("**ngram-k3** on `<model path>` ..."): the UI renders its parts as elements.
    description = lines.index("Description")
    assert lines[description + 1 : description + 3] == ["ngram-k3", "on"], shown


def test_run_page_screenshot(finished_run: Run, server: MlflowServer, tmp_path: Path, artifacts_dir: Path) -> None:
    png = artifacts_dir / "ui-run.png"
    png.unlink(missing_ok=True)
    result = run_chromium(run_url(server, finished_run), [f"--screenshot={png}"], tmp_path / "profile", BUDGETS_MS[0])
    assert result.returncode == 0, result.stderr[-3000:]
    data = png.read_bytes()
    assert data[:8] == PNG_MAGIC, f"{png} is not a PNG"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1600, 1200)
    # A blank or error page compresses to a few kB; the rendered run page with its tables is far larger.
    assert len(data) > 50_000, f"{png} is only {len(data)} bytes: probably a blank page"
