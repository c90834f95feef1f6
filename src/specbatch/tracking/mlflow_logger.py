"""Temporary: the old import path of ``tracking.logger``, kept only until run/generate.py imports from there."""

from specbatch.tracking.logger import RunLogger, mark_run_killed, mlflow_run

__all__ = ["RunLogger", "mark_run_killed", "mlflow_run"]
