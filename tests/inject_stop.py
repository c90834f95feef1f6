"""Runs jobs/generate.py as a real process that sends itself SIGTERM at its Nth dummy engine step (for tests).

INJECT_SIGTERM_AT_STEP=1 python tests/inject_stop.py engine.backend=dummy <hydra overrides>

A real signal through the job's real handlers, at a moment a test could not hit from outside: the dummy engine
answers a small data set within milliseconds. Everything else is the real job.
"""

import os
import runpy
import signal
import sys
from pathlib import Path

from specbatch.backends.dummy.dummy import DummyEngine

GENERATE = Path(__file__).resolve().parents[1] / "jobs" / "generate.py"
_real_step = DummyEngine.step
_steps = 0


def _step_then_signal(self):  # type: ignore[no-untyped-def]
    global _steps
    _steps += 1
    if _steps == int(os.environ["INJECT_SIGTERM_AT_STEP"]):
        os.kill(os.getpid(), signal.SIGTERM)
    return _real_step(self)


DummyEngine.step = _step_then_signal  # type: ignore[method-assign]

if __name__ == "__main__":
    sys.argv = [str(GENERATE), *sys.argv[1:]]
    runpy.run_path(str(GENERATE), run_name="__main__")
