"""The shard executor's call path (issue 51): how often one small run goes from the executor into the run folder's
paths, and how often into the executor itself, counted with ``sys.setprofile`` on one dummy-engine run.

    python -m specbatch.bench.call_path [--checkout DIR]

What is counted, precisely (every Python function call of the run, as the profiler sees it: a property's getter and
a method are calls, builtins are not):

- ``into_folder``: calls of a function of ``specbatch/run/folder.py`` made directly from a frame of
  ``specbatch/run/executor.py`` (the executor walking the folder itself), each call counted;
- ``into_executor``: calls of a function of ``specbatch/run/executor.py``, from anywhere (the executor's own helpers
  and comprehensions, and the pipeline's call of it);
- ``*_functions``: the distinct functions among them (e.g. 16 and 10 on 5dfb33a);
- ``folder_total``: calls of a function of ``specbatch/run/folder.py`` from anywhere (the steps' writes, the
  integrity checks, the resume plan): what the run asks of the folder in all, beside the executor's own walk.

The run: spec=none, engine.backend=dummy, tracking=off, 4 rows of a local JSONL file in chunks of 2, one shard,
written into a new temporary folder. ``--checkout`` counts another checkout's code (e.g. a worktree of main) in a
child process whose ``specbatch`` is that checkout's: this file uses only what every checkout has (the pipeline's
``run_job`` and the config's composition), so the same count runs on the code before and after a change.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any

log = logging.getLogger(__name__)

EXECUTOR, FOLDER = "specbatch/run/executor.py", "specbatch/run/folder.py"
ROWS = 4


class CallCounter:
    """A profile function counting the calls described in the module's docstring."""

    def __init__(self) -> None:
        self.into_folder = self.into_executor = self.folder_total = 0
        self.folder_functions: set[str] = set()
        self.executor_functions: set[str] = set()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        callee = frame.f_code.co_filename.replace(os.sep, "/")
        caller = frame.f_back.f_code.co_filename.replace(os.sep, "/") if frame.f_back else ""
        self.folder_total += callee.endswith(FOLDER)
        if callee.endswith(FOLDER) and caller.endswith(EXECUTOR):
            self.into_folder += 1
            self.folder_functions.add(frame.f_code.co_name)
        if callee.endswith(EXECUTOR):
            self.into_executor += 1
            self.executor_functions.add(frame.f_code.co_name)

    def counts(self) -> dict[str, Any]:
        return {
            "into_folder": self.into_folder,
            "into_folder_functions": sorted(self.folder_functions),
            "into_executor": self.into_executor,
            "into_executor_functions": sorted(self.executor_functions),
            "folder_total": self.folder_total,
        }


def count_here(conf_dir: Path) -> dict[str, Any]:
    """The counts of one small dummy run of the ``specbatch`` this process imports, composed from ``conf_dir``."""
    from hydra import compose, initialize_config_dir

    from specbatch.config import register_configs, to_job_config
    from specbatch.pipeline import run_job

    register_configs()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "rows.jsonl"
        data.write_text("".join(json.dumps({"id": f"r{i}", "q": f"question {i}"}) + "\n" for i in range(ROWS)))
        overrides = [
            "spec=none",
            "dataset=local",
            f"dataset.path={data}",
            "dataset.template='{q}'",
            "dataset.id_column=id",
            "chunk_size=2",
            "engine.backend=dummy",
            "tracking=off",
            f"output_root={Path(tmp) / 'outputs'}",
        ]
        with initialize_config_dir(config_dir=str(conf_dir.resolve()), version_base="1.3"):
            job = to_job_config(compose(config_name="config", overrides=overrides))
        counter = CallCounter()
        sys.setprofile(counter)
        try:
            run_job(job)
        finally:
            sys.setprofile(None)
    return counter.counts()


def count_checkout(checkout: Path) -> dict[str, Any]:
    """The counts of ``checkout``'s code, from a child process that imports its ``specbatch``."""
    env = {**os.environ, "PYTHONPATH": str(checkout.resolve() / "src")}
    done = subprocess.run(
        [sys.executable, __file__, "--here", str(checkout.resolve() / "conf")],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", type=Path, help="count this checkout's code (default: the one imported)")
    parser.add_argument("--here", type=Path, help=argparse.SUPPRESS)  # the child: count here, print JSON
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.here:
        sys.stdout.write(json.dumps(count_here(args.here)) + "\n")  # the parent reads the last line
        return 0
    checkout = args.checkout or Path(__file__).resolve().parents[3]
    counts = count_checkout(checkout)
    logging.getLogger().setLevel(logging.INFO)
    log.info("%s: %s", checkout, json.dumps(counts, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
