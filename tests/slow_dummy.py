"""Runs jobs/generate.py as a real process whose dummy engine steps take DUMMY_STEP_SECONDS each (for tests).

DUMMY_STEP_SECONDS=0.05 python tests/slow_dummy.py engine.backend=dummy <hydra overrides>

The dummy answers a small data set within milliseconds; a test that watches a job while it runs (its progress on a
terminal, in its log, in MLflow) needs one that lasts. Everything else is the real job.
"""

import os
import runpy
import sys
from pathlib import Path

from specbatch.backends.dummy.dummy import DummyEngine, StepCost

GENERATE = Path(__file__).resolve().parents[1] / "jobs" / "generate.py"
DummyEngine.start_step_cost = StepCost(base=float(os.environ["DUMMY_STEP_SECONDS"]))

if __name__ == "__main__":
    sys.argv = [str(GENERATE), *sys.argv[1:]]
    runpy.run_path(str(GENERATE), run_name="__main__")
