"""The checks that need installed packages or the checkpoints' config.json, run before the slow engine build.

The config dataclasses already refused what can be judged from the config alone; here the job's method runs its
own checks against what is on disk (or on the hub), as its module in :mod:`specbatch.methods` lists them: is the
draft checkpoint there, does it share the target's vocabulary, does an MTP target really have MTP layers. What a
backend requires of a method (vLLM's packages and model runners) is the backend's check, not this one.
"""

from __future__ import annotations

from specbatch.config.schema import JobConfig
from specbatch.methods import preflight as method_preflight


def preflight(job: JobConfig) -> None:
    """Every check of the job's method that can run before the engine, in its order; raises ConfigError."""
    method_preflight(job)
