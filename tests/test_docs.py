"""The documentation site builds with ``mkdocs build --strict`` (no stale link, anchor or page), and the README stays
a map: at most 250 lines, every path it names exists, every page it links to (and the heading it points at) exists.

The site is built into a temporary folder, never into the repository. The commands on the pages are checked by
tests/test_readme.py, with the README's.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import PROJECT_ROOT

README = PROJECT_ROOT / "README.md"
DOCS = PROJECT_ROOT / "docs"
MKDOCS = Path(sys.executable).parent / "mkdocs"
MAX_README_LINES = 250


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site built with --strict into a temporary folder; the build's output is in the assertion if it fails."""
    site_dir = tmp_path_factory.mktemp("site")
    # NO_MKDOCS_2_WARNING: Material's banner about its successor, printed on every build, is no warning of ours.
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [str(MKDOCS), "build", "--strict", "--site-dir", str(site_dir)],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"
    return site_dir


def test_the_site_builds_strictly(site: Path) -> None:
    assert (site / "index.html").is_file()
    assert (site / "performance" / "index.html").is_file()


def test_every_page_is_in_the_nav() -> None:
    """A page missing from nav: would be built but found by no reader (mkdocs only says so at INFO level)."""
    config = yaml.safe_load((PROJECT_ROOT / "mkdocs.yml").read_text())
    assert config["theme"]["name"] == "material"
    in_nav = {next(iter(entry.values())) for entry in config["nav"]}
    assert in_nav == {p.name for p in DOCS.glob("*.md")}
    # Plugins that fetch from the internet at build time (privacy, social cards) would fail an offline build.
    assert not {"privacy", "social"} & set(config.get("plugins", []))


def test_readme_is_a_map_of_at_most_250_lines() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines: move the detail to a page of docs/"
    # The layout of the code comes near the top, before the examples.
    headings = [line for line in lines if line.startswith("## ")]
    assert headings.index("## Layout of the code") < headings.index("## One example per use")


def test_every_path_the_readme_names_exists() -> None:
    text = README.read_text()
    # src/..., conf/..., jobs/... up to a placeholder (<date>) or the end of the path; a glob must match something.
    paths = set(re.findall(r"(?<![\w./*-])((?:src|conf|jobs)/[\w./*-]*[\w*]/?)", text))
    assert paths, "the README names no src/, conf/ or jobs/ path"
    missing = sorted(p for p in paths if not any(PROJECT_ROOT.glob(p.rstrip("/"))))
    assert missing == [], f"README.md names paths that do not exist: {missing}"


def test_the_readme_tree_lists_the_packages_of_today() -> None:
    """The tree under src/specbatch/ in the README names every package and module there, and nothing else."""
    block = re.search(r"^```text\nsrc/specbatch/\n(.*?)^```", README.read_text(), re.S | re.M)
    assert block, "README.md: the tree of src/specbatch/ is gone"
    named = set()
    for line in block.group(1).splitlines():
        entry = re.match(r"^[├└]── (\S+)", line)
        if entry:
            named.add(entry.group(1).rstrip("/"))
    package = PROJECT_ROOT / "src" / "specbatch"
    present = {p.name for p in package.iterdir() if (p / "__init__.py").exists()}
    present |= {p.name for p in package.glob("*.py") if p.name != "__init__.py"}
    assert named == present, f"README tree: missing {sorted(present - named)}, gone {sorted(named - present)}"


def test_every_page_the_readme_links_exists(site: Path) -> None:
    links = re.findall(r"\]\((docs/[^)\s#]+)(?:#([^)\s]+))?\)", README.read_text())
    assert len(links) >= 10
    for page, anchor in links:
        assert (PROJECT_ROOT / page).is_file(), f"README.md links to {page}, which does not exist"
        if anchor:
            html = site / Path(page).relative_to("docs").with_suffix("") / "index.html"
            assert f'id="{anchor}"' in html.read_text(), f"README.md links to {page}#{anchor}: no such heading"
