"""A sweep as a person reviews it in MLflow's UI: a real ``mlflow server``, a real sweep (the job's own code, with
the dummy engine so it takes seconds), jobs/compare.py on it, and headless chromium on the runs table and the chart
view. Asserts what the issue asked a reviewer to see at a glance:

- the runs table tells the runs apart: every run name shown starts with its method and k (``ngram-k2 · bs4 ...``);
- the chart view opens with compare's ``against_none/speedup``: among the first charts, one bar per compared run.

Screenshots and DOMs are kept in ``outputs/test-artifacts/`` (``ui-sweep-table.png``, ``ui-sweep-charts.png``).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

# ``server``: that module's fixture, one real mlflow server for this module too.
from test_ui_browser import ARTIFACTS, BUDGETS_MS, run_chromium, server, visible_text  # noqa: F401

from conftest import PNG_MAGIC, PROJECT_ROOT, run_generate
from mlflow_server import MlflowServer
from specbatch.tracking.comparison import compared_runs_link

pytestmark = pytest.mark.slow

EXPERIMENT = "ui-sweep"
SPEEDUP = "against_none/speedup"
# Method and k first, then the batch size: what a run name must start with.
NAME_START = re.compile(r"^(none|ngram-k[23]) · bs[14]\b")


@pytest.fixture(scope="module")
def compared_sweep(server: MlflowServer, tmp_path_factory: pytest.TempPathFactory) -> dict:  # noqa: F811
    """spec=none,ngram × k 2,3 × batch 1,4 with the dummy engine, logged to the server, then compared."""
    root = tmp_path_factory.mktemp("ui-sweep")
    sweep = root / "sweep"
    result = run_generate(
        [
            "-m",
            "spec=none,ngram",
            "spec.num_speculative_tokens=2,3",
            "engine.max_num_seqs=1,4",
            "engine.backend=dummy",
            "max_samples=4",
            f"output_root={root}",
            f"hydra.sweep.dir={sweep}",
            f"tracking.uri={server.uri}",
            f"tracking.experiment={EXPERIMENT}",
        ],
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    compare = subprocess.run(
        [sys.executable, str(PROJECT_ROOT / "jobs" / "compare.py"), str(sweep)],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert compare.returncode == 0, compare.stderr[-4000:]
    client = MlflowClient(server.uri)
    experiment = client.get_experiment_by_name(EXPERIMENT)
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    # What compare printed: the link to the comparison's runs (table and chart view).
    links = re.findall(r"MLflow: the compared runs, best \S+ first: (\S+) \(charts: (\S+)\)", compare.stderr)
    assert len(links) == 1, compare.stderr[-3000:]
    out_dir = str(sweep / "comparison")
    assert links[0][0] == compared_runs_link(server.uri, experiment.experiment_id, out_dir, SPEEDUP)
    return {"children": children, "table": links[0][0], "charts": links[0][1]}


def dom_showing(url: str, profile: Path, must_show: str, artifact: str, *, in_markup: bool = False) -> str:
    """The page's DOM once it shows ``must_show`` (retried with a longer budget), kept as an artifact.

    ``in_markup``: look for it in the markup (e.g. a chart card's ``title="..."``) rather than the visible text: the
    chart view names a metric in its sort box long before the slower chart cards are drawn (on an AVX2-only CPU the
    cards took longer than the first budget)."""
    dom = ""
    for budget in BUDGETS_MS:
        result = run_chromium(url, ["--dump-dom"], profile, budget)
        assert result.returncode == 0, result.stderr[-3000:]
        dom = result.stdout
        if must_show in (dom if in_markup else visible_text(dom)):
            break
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / artifact).write_text(dom)
    return dom


def screenshot(url: str, profile: Path, name: str) -> None:
    png = ARTIFACTS / name
    png.unlink(missing_ok=True)
    result = run_chromium(url, [f"--screenshot={png}"], profile, BUDGETS_MS[0])
    assert result.returncode == 0, result.stderr[-3000:]
    assert png.read_bytes()[:8] == PNG_MAGIC


def test_the_children_are_named_method_first_and_carry_speedup(compared_sweep: dict) -> None:
    children = compared_sweep["children"]
    # none at two batch sizes (its k=3 jobs found the k=2 folder finished), ngram k2/k3 at two batch sizes.
    assert len(children) == 6
    for child in children:
        assert NAME_START.match(child.info.run_name), child.info.run_name
        assert SPEEDUP in child.data.metrics


def test_the_runs_table_tells_the_runs_apart(compared_sweep: dict, tmp_path: Path) -> None:
    url = compared_sweep["table"]
    dom = dom_showing(url, tmp_path / "profile", "ngram-k3 · bs4", "ui-sweep-table.html")
    lines = visible_text(dom).splitlines()
    shown = f"page text of {url}:\n{chr(10).join(lines)[:4000]}"
    # Each row of the runs table: a "Hide run" toggle, the run's colour, then its name.
    names = [
        lines[i + 1]
        for i, line in enumerate(lines[:-1])
        if i > 0 and lines[i - 1] == "Hide run" and re.fullmatch(r"#[0-9a-f]{6}", line)
    ]
    assert len(names) == len(compared_sweep["children"]) == 6, shown
    for name in names:
        assert NAME_START.match(name), f"{name!r} does not start with its method and k\n{shown}"
    assert len(set(names)) == len(names), shown
    assert "<strong>6</strong> matching runs" in dom, shown  # the filter leaves out the parent and other runs
    # Best speedup first (the link sorts by it).
    speedup = {c.info.run_name: c.data.metrics[SPEEDUP] for c in compared_sweep["children"]}
    assert [speedup[n] for n in names] == sorted(speedup.values(), reverse=True), shown
    screenshot(url, tmp_path / "profile", "ui-sweep-table.png")


def test_the_chart_view_opens_with_one_speedup_bar_per_run(compared_sweep: dict, tmp_path: Path) -> None:
    url = compared_sweep["charts"]
    dom = dom_showing(url, tmp_path / "profile", f'title="{SPEEDUP}"', "ui-sweep-charts.html", in_markup=True)
    metrics = {name for child in compared_sweep["children"] for name in child.data.metrics}
    # Chart cards carry their metric as a title; the plot toolbars' titles (Zoom, Pan, ...) are not metrics.
    titles = [(m.start(), m.group(1)) for m in re.finditer(r'title="([^"]+)"', dom) if m.group(1) in metrics]
    order = list(dict.fromkeys(title for _, title in titles))
    assert SPEEDUP in order[:3], f"the first charts are {order[:8]}"
    start = next(position for position, title in titles if title == SPEEDUP)
    end = next((position for position, title in titles if position > start and title != SPEEDUP), len(dom))
    # One plotly bar (a path of class "point") per compared run in the speedup chart.
    assert dom[start:end].count('class="point"') == len(compared_sweep["children"])
    screenshot(url, tmp_path / "profile", "ui-sweep-charts.png")
