"""The shape of the code: subpackages by concern, modules a reader can take in, no import cycles, thin jobs/."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

from conftest import PROJECT_ROOT
from specbatch.config.engine import backend_names, knobs

SRC = PROJECT_ROOT / "src"
PACKAGE = SRC / "specbatch"
# Modules of up to 400 lines read well; split when a second concern appears.
MAX_MODULE_LINES = 400
# An entry script parses arguments or composes the config and hands over to the package.
MAX_JOB_LINES = 100
# The data flow, bottom up: a package may import only the ones before it (imports inside functions too), so the
# architecture can be read off the tree and no package reaches back into one built on it.
LAYERS = [
    "common",
    "assets",
    "methods",
    "config",
    "data",
    "engine",
    "serving",
    "backends",
    "run",
    "tracking",
    "cluster",
    "prediction",
    "analysis",
    "auto",
    "drafter",
    "pipeline",
    "bench",
]
# jobs/bench_bare.py is the user's own vLLM script the job is measured against: it must not use the package.
NOT_THIN_ON_PURPOSE = {"bench_bare.py"}


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_imports(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Each module's imports of other package modules, wherever they are: at the top, under ``if TYPE_CHECKING``
    (a circle for the reader and the type checker, and one edit away from a real one) and inside functions."""
    modules = {module_name(p): p for p in package.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            for target in targets:
                parts = target.split(".")
                # Importing a.b.c runs a/__init__ and a/b/__init__ first.
                for i in range(2, len(parts) + 1):
                    imported = ".".join(parts[:i])
                    if imported in modules and imported != name and not name.startswith(imported + "."):
                        graph[name].add(imported)
    return graph


def cycle_from(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of the graph as the list of modules along it, or None."""
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = "done"
        path.pop()
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def test_the_cycle_finder_sees_a_cycle() -> None:
    assert cycle_from({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle_from({"a": {"b"}, "b": set()}) is None


def test_the_cycle_test_finds_a_circle_hidden_under_type_checking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A planted package: a imports b at the top, b imports a only for the type checker.
    planted = tmp_path / "src" / "specbatch"
    (planted / "analysis").mkdir(parents=True)
    (planted / "__init__.py").write_text("")
    (planted / "analysis" / "__init__.py").write_text("")
    (planted / "analysis" / "a.py").write_text("from specbatch.analysis.b import B\n")
    (planted / "analysis" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from specbatch.analysis.a import A\nclass B: ...\n"
    )
    (planted / "analysis" / "c.py").write_text("def late():\n    from specbatch.analysis.c2 import f\n")
    (planted / "analysis" / "c2.py").write_text("from specbatch.analysis.c import late\n")
    monkeypatch.setattr(sys.modules[__name__], "SRC", tmp_path / "src")
    graph = module_imports(planted)
    assert graph["specbatch.analysis.b"] == {"specbatch.analysis.a"}
    assert graph["specbatch.analysis.c"] == {"specbatch.analysis.c2"}
    assert cycle_from(graph) == ["specbatch.analysis.a", "specbatch.analysis.b", "specbatch.analysis.a"]


def test_no_import_cycle_between_modules() -> None:
    graph = module_imports()
    assert "specbatch.run.streaming" in graph and graph["specbatch.run.streaming"], "the graph was read"
    assert cycle_from(graph) is None


def package_imports() -> dict[tuple[str, str], list[str]]:
    """(package, package it imports) → the modules doing it, for every import anywhere in a module."""
    edges: dict[tuple[str, str], list[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        if module_name(path) == "specbatch":
            continue  # the package's own __init__ imports nothing
        own = module_name(path).split(".")[1]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [node.module]
            else:
                continue
            for target in targets:
                parts = target.split(".")
                if parts[0] == "specbatch" and len(parts) > 1 and parts[1] != own:
                    edges.setdefault((own, parts[1]), []).append(module_name(path))
    return edges


def test_packages_import_only_the_layers_below_them() -> None:
    edges = package_imports()
    assert ("run", "engine") in edges, "the imports were read"
    upward = {edge: modules for edge, modules in edges.items() if LAYERS.index(edge[1]) >= LAYERS.index(edge[0])}
    assert upward == {}


def test_the_package_is_split_by_concern() -> None:
    top = sorted(p.name for p in PACKAGE.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists())
    assert sorted(p.removesuffix(".py") for p in top if p != "__init__.py") == sorted(LAYERS)


def test_no_module_is_too_long_to_read() -> None:
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py") if (n := len(p.read_text().splitlines()))}
    assert {name: n for name, n in long.items() if n > MAX_MODULE_LINES} == {}


def test_job_scripts_are_thin() -> None:
    scripts = {p.name: len(p.read_text().splitlines()) for p in (PROJECT_ROOT / "jobs").glob("*.py")}
    assert "generate.py" in scripts
    fat = {name: n for name, n in scripts.items() if n > MAX_JOB_LINES and name not in NOT_THIN_ON_PURPOSE}
    assert fat == {}


def test_tests_mirror_the_packages() -> None:
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    test_dirs = {p.name for p in (PROJECT_ROOT / "tests").iterdir() if p.is_dir() and any(p.glob("test_*.py"))}
    assert test_dirs <= packages
    # Only tests of the whole product (the GPU install, README commands, the docs site, this file) stay at the top.
    top = sorted(p.name for p in (PROJECT_ROOT / "tests").glob("test_*.py"))
    assert top == ["test_docs.py", "test_gpu_install.py", "test_package.py", "test_readme.py"]


# Comparisons with a backend's name that are about something else: a summary's counters_scope is "engine",
# "server" (a server's counters, every client's) or "requests", whichever backend produced it.
NOT_A_BACKEND = {
    ("specbatch.run.summary_table", "summary.counters_scope"),
    # The drafter export's capture of hidden states (transformers or vLLM on a GPU), not the job's engine.backend.
    ("specbatch.drafter.export", "capture"),
}
# Modules outside backends/ that import a backend's folder, each with its reason (a backend's knobs are read through
# its own Options, e.g. vllm_options(job), so an import is where another package could reach them).
BACKEND_IMPORTERS = {
    # jobs/serve.py is the vllm backend's serve step: it starts vLLM's server (VllmServer) and prints its commands.
    ("jobs.serve", "vllm"),
    # Benchmarks of vLLM itself: its engine processes, and its offline engine against its own server.
    ("specbatch.bench.processes", "vllm"),
    ("specbatch.bench.offline_vs_server", "vllm"),
    # The step timing's cost includes the offline vLLM engine's own stat logger (its StepStats), timed alone.
    ("specbatch.bench.step_overhead", "vllm"),
}
# Backend knobs read outside the folders of the backends that declare them as job.engine.<knob> (or
# job.model.gguf), each with its reason; none today.
KNOB_READERS: set[tuple[str, str]] = set()
# engine.backend's values: the backends' folders.
BACKEND_NAMES = backend_names()


def backend_knob_owners() -> dict[tuple[str, str], tuple[str, ...]]:
    """(section, knob) → the backends whose Options declare it."""
    return {(k.section, k.field.name): k.owners for k in knobs().values()}


def _folder(module: str) -> str | None:
    """The backend folder a module is in (specbatch.backends.<name>.x → name), None outside backends/."""
    parts = module.split(".")
    return parts[2] if parts[1:2] == ["backends"] and len(parts) > 2 else None


def _section_of(node: ast.expr) -> str | None:
    """The section an expression names: ``job.engine`` / ``engine`` → engine, ``x["engine"]`` → engine."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        return str(node.slice.value)
    return None


def backend_specifics(package: Path = PACKAGE, jobs: Path | None = None) -> list[tuple[str, str]]:
    """(module, what) for each backend name compared or looked up, and each backend knob read, outside the folder
    of the backend that owns it: the backend's folder owns what differs between backends, and the rest of the job
    asks it (specbatch.engine.backend_class)."""
    owners = backend_knob_owners()
    files = [*package.rglob("*.py"), *(jobs.glob("*.py") if jobs else [])]
    found = []
    for path in files:
        name = module_name(path) if path.is_relative_to(SRC) else f"jobs.{path.stem}"
        folder = _folder(name)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
                for i, operand in enumerate(operands):
                    elements = operand.elts if isinstance(operand, ast.Tuple | ast.List | ast.Set) else [operand]
                    named = [e.value for e in elements if isinstance(e, ast.Constant) and e.value in BACKEND_NAMES]
                    if any(n != folder for n in named):
                        other = ast.unparse(operands[1 - i] if len(operands) == 2 else node)
                        if (name, other) not in NOT_A_BACKEND:
                            found.append((name, other))
            elif isinstance(node, ast.Subscript | ast.Call):
                keys = [node.slice] if isinstance(node, ast.Subscript) else node.args[:1]
                if isinstance(node, ast.Call) and not (
                    isinstance(node.func, ast.Attribute) and node.func.attr in ("get", "pop")
                ):
                    keys = []
                for key in keys:
                    if isinstance(key, ast.Constant) and key.value in BACKEND_NAMES and key.value != folder:
                        found.append((name, ast.unparse(node)))
                    section = _section_of(node.value if isinstance(node, ast.Subscript) else node.func.value)
                    knob = (section, key.value) if isinstance(key, ast.Constant) else None
                    if knob in owners and folder not in owners[knob]:
                        found.append((name, ".".join(knob)))
            if isinstance(node, ast.Import | ast.ImportFrom) and folder is None:
                modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                for module in modules:
                    parts = module.split(".")
                    if (
                        parts[:2] == ["specbatch", "backends"]
                        and len(parts) > 2
                        and (name, parts[2]) not in (BACKEND_IMPORTERS)
                    ):
                        found.append((name, f"import {module}"))
            if isinstance(node, ast.Attribute) and (knob := (_section_of(node.value), node.attr)) in owners:
                if folder not in owners[knob] and (name, ".".join(knob)) not in KNOB_READERS:
                    found.append((name, ".".join(knob)))
    return found


def test_no_backend_name_or_knob_outside_its_folder() -> None:
    assert backend_specifics(jobs=PROJECT_ROOT / "jobs") == []


def test_the_backend_test_sees_planted_names_and_knobs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    planted = tmp_path / "src" / "specbatch"
    (planted / "analysis").mkdir(parents=True)
    (planted / "backends" / "server").mkdir(parents=True)
    (planted / "analysis" / "a.py").write_text(
        'def label(job, config):\n    if job.engine.backend == "llama_cpp":\n        return job.model.gguf\n'
        '    url = config["engine"]["url"]\n'
        "    from specbatch.backends.server import server_options\n"
        '    return "x" if config["engine"]["backend"] in ("server", "other") else config.get("dummy")\n'
    )
    # In its own folder a backend reads its knobs and names itself; another backend's knob is still refused.
    (planted / "backends" / "server" / "s.py").write_text(
        'def f(job):\n    return job.engine.url if job.engine.backend == "server" else job.engine.llama_server\n'
    )
    monkeypatch.setattr(sys.modules[__name__], "SRC", tmp_path / "src")
    assert sorted(backend_specifics(planted)) == sorted(
        [
            ("specbatch.analysis.a", "job.engine.backend"),
            ("specbatch.analysis.a", "model.gguf"),
            ("specbatch.analysis.a", "engine.url"),
            ("specbatch.analysis.a", "config['engine']['backend']"),
            ("specbatch.analysis.a", "config.get('dummy')"),
            ("specbatch.analysis.a", "import specbatch.backends.server"),
            ("specbatch.backends.server.s", "engine.llama_server"),
        ]
    )


def test_comments_name_only_documents_the_repository_has() -> None:
    # A project document (README.md, DESIGN.md, ...) named in the code must be one a reader of the repository can
    # open; the tests' own scratch files (written into tmp_path) are not documents.
    named, pages, sections = set(), set(), set()
    for path in [*PACKAGE.rglob("*.py"), *(PROJECT_ROOT / "jobs").rglob("*"), *(PROJECT_ROOT / "conf").rglob("*")]:
        if path.is_file():
            text = path.read_text(errors="replace")
            named |= set(re.findall(r"\b([A-Z][A-Z0-9_-]+\.md)\b", text))
            # The documentation site's pages (docs/<page>.md), and the README's sections quoted as README "...",
            # which moved to the site: a comment pointing at either names what is there.
            pages |= set(re.findall(r"\b(docs/[a-z0-9-]+\.md)\b", text))
            sections |= set(re.findall(r'README "([^"]+)"', text))
    assert "README.md" in named and "docs/methods.md" in pages
    assert sorted(name for name in named | pages if not (PROJECT_ROOT / name).is_file()) == []
    headings = {line.lstrip("# ").strip() for line in (PROJECT_ROOT / "README.md").read_text().splitlines()}
    assert sorted(section for section in sections if section not in headings) == []


def test_a_module_name_means_one_thing_across_the_package() -> None:
    # observer, sweep, schedule, files, ...: one module per name, so a name in an import says which one it is.
    stems: dict[str, list[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        if path.name != "__init__.py":
            stems.setdefault(path.stem, []).append(module_name(path))
    assert {stem: names for stem, names in stems.items() if len(names) > 1} == {}


# What records of older versions lack and what it meant lives with each record's owner (specbatch.run.records): its
# version, read, write and upgrade. Elsewhere no version constant or upgrade helper is named, and no module says
# "written before", except the config's fields, each declaring the value runs written before it had (OLD_RUNS_DEFAULT,
# which run.records.run_json applies), and these, which say it of something else:
WRITTEN_BEFORE_ELSEWHERE = {
    # Chunks written before a stop signal are kept: a stop, not a format.
    "specbatch.common.interrupts",
    # A setting older runs did not record is no difference (issue 51: the engine's owner words this docstring).
    "specbatch.engine.acceptance_settings",
}
RECORD_OWNERS = "specbatch.run.records"
# Names of versions and of upgrades from them: RUN_FORMAT, SCHEMA_VERSION, upgrade_run_record, seed_before_schema_5.
VERSION_NAME = re.compile(r"^[A-Z_]*_FORMAT$|^SCHEMA_VERSION(_KEY)?$|^upgrade_|_before_schema_")


def older_format_knowledge(package: Path = PACKAGE) -> list[tuple[str, str]]:
    """(module, what) for each module outside the records' owners that knows an older format: a version constant or
    upgrade helper it names (in an import or in its code), or the words "written before"."""
    found = []
    for path in package.rglob("*.py"):
        name = module_name(path)
        if name.startswith(RECORD_OWNERS):
            continue
        text = path.read_text()
        if (
            "written before" in text
            and name not in WRITTEN_BEFORE_ELSEWHERE
            and not name.startswith("specbatch.config")
        ):
            found.append((name, "written before"))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Name):
                names = [node.id]
            elif isinstance(node, ast.Attribute):
                names = [node.attr]
            elif isinstance(node, ast.ImportFrom):
                names = [alias.name for alias in node.names]
            else:
                continue
            found += [(name, n) for n in names if VERSION_NAME.search(n)]
    return sorted(set(found))


def test_older_formats_are_known_only_to_the_records_owners() -> None:
    assert (PACKAGE / "run" / "records" / "run_json.py").is_file(), "the owners are where the rule looks"
    assert older_format_knowledge() == []


def test_the_older_format_rule_sees_a_planted_branch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    planted = tmp_path / "src" / "specbatch"
    (planted / "analysis").mkdir(parents=True)
    (planted / "run" / "records").mkdir(parents=True)
    (planted / "analysis" / "a.py").write_text(
        "from specbatch.run.records.run_json import RUN_FORMAT\n"
        "def read(record):\n"
        "    # Runs written before the key existed lack it.\n"
        "    return record.get('k', 0) if record['format'] < RUN_FORMAT else record['k']\n"
    )
    (planted / "analysis" / "b.py").write_text("from specbatch.run.records import output_parts\n")
    (planted / "analysis" / "c.py").write_text("def f(row):\n    return output_parts.seed_before_schema_5({}, row)\n")
    (planted / "run" / "records" / "run_json.py").write_text("RUN_FORMAT = 2  # written before: format 1\n")
    monkeypatch.setattr(sys.modules[__name__], "SRC", tmp_path / "src")
    assert older_format_knowledge(planted) == [
        ("specbatch.analysis.a", "RUN_FORMAT"),
        ("specbatch.analysis.a", "written before"),
        ("specbatch.analysis.c", "seed_before_schema_5"),
    ]


# Where a drafting method's name may be written, besides its own module (specbatch/methods/<name>.py) and the
# backends' tables (specbatch/backends/<backend>/): each other file that names one, and why. ``none`` (the baseline)
# and ``auto`` (the chooser) are roles, not methods: every part of the job may test for them.
METHOD_NAMES_ALLOWED = {
    # assets sits below methods: the stand-ins are built there, and their method modules name them (stand_in).
    "assets/cache.py": "the tiny family's member folders, which are the stand-ins' names",
    "assets/tiny.py": "the builders of the stand-in checkpoints, one per member folder",
    # Benchmarks choose the set-ups they measure; their names are recorded beside the measured numbers.
    "bench/full_engine.py": "the measured set-ups of the full-engine benchmark",
    "bench/prediction_bench.py": "the measured set-ups and per-method goals of the prediction benchmark",
    "bench/sampling_bench.py": "the measured set-ups of the sampling benchmark",
    "bench/schedule_sweep.py": "the method whose k schedule is swept",
    "bench/speedup.py": "the measured set-ups of the speedup benchmark",
}


def method_name_uses(names: set[str]) -> dict[str, list[str]]:
    """Files of the package (relative to it) and the method names they write as a string or SpecMethod.<name>."""
    uses: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith("backends/"):
            continue
        # A method module may name itself, and only itself; the package's helpers none.
        own = path.stem if rel.startswith("methods/") else None
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                name = node.value
            elif isinstance(node, ast.Attribute) and getattr(node.value, "id", None) == "SpecMethod":
                name = node.attr
            else:
                continue
            if name in names and name != own:
                uses.setdefault(rel, []).append(name)
    return uses


def test_a_method_is_named_only_in_its_module_and_the_backends_tables() -> None:
    from specbatch.methods import METHODS, ROLES

    names = {m.value for m in METHODS if m not in ROLES}
    assert {"ngram", "eagle3", "dflash"} <= names, "the methods were discovered"
    uses = method_name_uses(names)
    assert {rel: sorted(set(found)) for rel, found in uses.items() if rel not in METHOD_NAMES_ALLOWED} == {}
    # An exception that no longer names a method is stale: drop it.
    assert sorted(set(METHOD_NAMES_ALLOWED) - set(uses)) == []
