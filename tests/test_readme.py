"""Every command in README.md and in the documentation pages (docs/*.md) runs as written — dry: nothing starts an
engine, Slurm or the set-up.

Commands come from the fenced ``bash`` blocks (backslash continuations joined, comments dropped) and from the code
in table rows. Through the real shell (and make), so quoting is checked as users type it:
- ``python jobs/generate.py ...`` runs with ``--cfg job`` appended (composition only) and must exit 0; a sweep (``-m``,
  which Hydra will not combine with ``--cfg``) has its arguments taken from bash and every job of it composed;
- ``make run ARGS="..."`` is expanded by ``make -n`` and the generate command make would run is checked as above;
- any other ``make <target>`` must exist (``make -n``), any other ``jobs/*`` script must exist, and the flags shown
  for a Python job, for ``mlflow`` or for ``mkdocs`` must be in its ``--help``.
A command written on several pages is checked once, under the first page that shows it.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

from conftest import CONF_DIR, PROJECT_ROOT
from specbatch.config.overrides import parse_overrides

README = PROJECT_ROOT / "README.md"
# The README, then every page of the documentation site, in a fixed order (the test ids name the page).
PAGES = [README, *sorted((PROJECT_ROOT / "docs").glob("*.md"))]
VENV_BIN = Path(sys.executable).parent
# Programs a README command may start with, beyond make, python and sbatch: nothing of theirs is checked.
UNCHECKED_PROGRAMS = {"mkdir"}
ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def strip_comment(line: str) -> str:
    """The line without a shell comment: an unquoted # at the start of a word starts one."""
    quote = None
    escaped = False
    for i, char in enumerate(line):
        if escaped:
            escaped = False
        elif char == "\\" and quote != "'":
            escaped = True
        elif quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def readme_commands(text: str) -> list[str]:
    commands = []
    for block in re.findall(r"^```bash\n(.*?)^```", text, re.S | re.M):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            command = strip_comment(line).strip()
            if command:
                commands.append(command)
    for row in (line for line in text.splitlines() if line.startswith("|")):
        commands += [
            code for code in re.findall(r"`([^`]+)`", row) if re.match(r"(make|python|\.venv/bin/)\S* ", code)
        ]
    return commands


def page_commands(pages: list[Path]) -> list[tuple[str, str]]:
    """(page, command) for every command of ``pages``, each command once: under the first page that shows it."""
    seen: dict[str, str] = {}
    for page in pages:
        for command in readme_commands(page.read_text()):
            seen.setdefault(command, page.relative_to(PROJECT_ROOT).as_posix())
    return [(page, command) for command, page in seen.items()]


PAGE_COMMANDS = page_commands(PAGES)
COMMANDS = [command for _, command in PAGE_COMMANDS]


def bash(command: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``command`` through bash in the project folder, with the venv's ``python`` and ``mlflow`` first on PATH."""
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(
        ["bash", "-c", command], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def words(command: str) -> list[str]:
    """The words of a command without its leading VAR=value assignments."""
    parts = shlex.split(command)
    while parts and ENV_ASSIGNMENT.match(parts[0]):
        parts.pop(0)
    return parts


def shell_arguments(command: str, program: str) -> list[str]:
    """The arguments bash hands to ``program`` in ``command`` (quotes removed as the shell does)."""
    head, _, rest = command.partition(program)
    result = bash(f'__args() {{ printf "%s\\0" "$@"; }}; __args {rest}')
    assert result.returncode == 0, f"bash cannot parse {command!r}: {result.stderr}"
    return result.stdout.split("\0")[:-1]


def check_generate(command: str) -> None:
    """A jobs/generate.py command line composes (single run: for real with --cfg job; sweep: every job of it)."""
    args = shell_arguments(command, "jobs/generate.py")
    if "-m" not in args and "--multirun" not in args:
        result = bash(f"{command} --cfg job")
        assert result.returncode == 0, f"{command!r} --cfg job failed:\n{result.stderr[-3000:]}"
        assert "model:" in result.stdout and "spec:" in result.stdout, result.stdout[-2000:]
        return
    overrides = [a for a in args if a not in ("-m", "--multirun")]
    assert not [a for a in overrides if a.startswith("-")], f"{command!r}: flags Hydra's sweep would not take"
    parsed = parse_overrides(overrides)
    [jobs] = BasicSweeper.split_arguments(parsed, max_batch_size=None)
    assert len(jobs) > 1, f"{command!r} is a sweep of one job"
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        for job in jobs:
            cfg = compose(config_name="config", overrides=job, return_hydra_config=True)
            assert cfg.model.name and cfg.spec.method, job


def check_make(command: str) -> None:
    target = next(w for w in words(command)[1:] if not w.startswith("-") and "=" not in w)
    dry = bash(command.replace("make ", "make -n ", 1))
    assert dry.returncode == 0, f"{command!r}: make -n failed:\n{dry.stderr}"
    if target == "run":
        [generate] = [line for line in dry.stdout.splitlines() if "jobs/generate.py" in line]
        check_generate(generate)


def check_script(command: str) -> None:
    """A script of jobs/ exists; for a Python job, every --flag shown is in its --help."""
    script = next(w for w in words(command) if w.startswith("jobs/"))
    assert (PROJECT_ROOT / script).is_file(), f"{command!r}: {script} does not exist"
    if script.endswith(".py"):
        help_text = bash(f"python {script} --help").stdout
        for flag in re.findall(r"(?<!\S)(--[a-z][a-z0-9-]*)", command):
            assert flag in help_text, f"{command!r}: {script} --help does not list {flag}"


@pytest.mark.parametrize(("page", "command"), PAGE_COMMANDS, ids=[f"{p}: {c}" for p, c in PAGE_COMMANDS])
def test_readme_command_runs_as_written(page: str, command: str) -> None:
    program, *rest = words(command)
    if program == "make":
        check_make(command)
    elif program.endswith("python") and rest[:1] == ["jobs/generate.py"]:
        check_generate(command)
    elif program.endswith("python") or program == "bash":
        check_script(command)
    elif program == "sbatch":
        # The overrides after the batch script go to jobs/generate.py as they are.
        check_script(command)
        script = next(w for w in words(command) if w.startswith("jobs/"))
        check_generate(f"python jobs/generate.py {command.partition(script)[2]}")
    elif program.endswith(("mlflow", "mkdocs")):
        help_text = bash(f"{program} {rest[0]} --help").stdout
        for flag in re.findall(r"(?<!\S)(--[a-z][a-z0-9-]*)", command):
            assert flag in help_text, f"{command!r} ({page}): {program} {rest[0]} --help does not list {flag}"
    else:
        assert program in UNCHECKED_PROGRAMS, f"{page}: command {command!r} is not checked by this test"


def test_readme_commands_are_found() -> None:
    """The extraction itself: the examples this test exists for are among the commands (README and pages)."""
    assert sum(c.startswith("make run ARGS=") for c in COMMANDS) >= 5
    assert any("dataset.template=" in c for c in COMMANDS)
    assert any(c.startswith("python jobs/generate.py model=") for c in COMMANDS)  # the method table
    assert any(" -m " in c and "jobs/generate.py" in c for c in COMMANDS)
    assert strip_comment("make run ARGS=\"a='#x'\"  # comment") == "make run ARGS=\"a='#x'\""
    assert "docs/methods.md" in {page for page, _ in PAGE_COMMANDS}  # the pages are read, not only the README


def test_readme_shows_one_example_per_use() -> None:
    """The README is the map: the two commands, a Hydra run, a sweep, Slurm and the MLflow UI, each as a command."""
    readme = readme_commands(README.read_text())
    assert readme[:2] == ["make run", "make test"]  # .ci/run calls make test
    assert any(c.startswith(".venv/bin/python jobs/generate.py") and " -m " not in c for c in readme)
    assert any(" -m " in c and "jobs/generate.py" in c for c in readme)
    assert any("hydra/launcher=slurm" in c for c in readme) and any(c.startswith("sbatch ") for c in readme)
    assert "make ui" in readme
