"""The driver's connection to Ray (``launcher=ray``): connect to a cluster or start a local Ray, and end it.

A local Ray the job starts gets a session folder of its own (removed after, never /tmp/ray's shared one), a reaper
that ends its processes if the job is killed (Ray's dashboard and runtime-env agents outlive a kill -9 of the
driver), and its workers at the job's own priority. ``ray.init`` sets its own SIGTERM handler (``sys.exit``) over the
job's: it is kept from doing so, and a SIGTERM meanwhile becomes the job's own stop. Ray's automatic ``ray.init``
(any Ray call when Ray is not up) is off for the driver: after the job's ``ray.shutdown()`` a late call of Ray Data's
would otherwise start a second local Ray. On a stop, Ray Data's execution is shut down and its reading thread
joined before ``ray.shutdown()`` (:func:`stop_execution`), so nothing of Ray Data runs on without Ray.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specbatch.cluster.ray_checks import job_address
from specbatch.common.interrupts import STOP_SIGNALS, StopRequested, raise_if_stopped
from specbatch.config import RayConfig
from specbatch.serving.reaper import RAY_DIR_PREFIX, Reaper

log = logging.getLogger(__name__)

# Seconds a stop waits for Ray Data's reading thread to end once its execution is shut down (it ends in about one).
JOIN_SECONDS = 30.0


@dataclass
class RayConnection:
    """What connect() did: whether it connected (and so shuts Ray down), and for a local Ray the reaper that ends its
    processes if the job is killed and the temporary folder of its session, removed after."""

    connected: bool = False
    reaper: Reaper | None = None
    temp_dir: Path | None = None

    @property
    def local(self) -> bool:
        return self.temp_dir is not None

    def close(self) -> None:
        """Shut Ray down if this connection started it (its actors end, and a local Ray with every process of it),
        then stop the reaper and remove the local session's folder (the job made it; nothing else is in it)."""
        if self.connected:
            import ray

            ray.shutdown()
            # Marked only after: a stop that interrupts the shutdown leaves a second close() to do it again.
            self.connected = False
        reaper, self.reaper = self.reaper, None
        if reaper is not None:
            reaper.stop()
        temp_dir, self.temp_dir = self.temp_dir, None
        if temp_dir is not None:
            shutil.rmtree(temp_dir, ignore_errors=True)


# Ray Data's executions in this process, recorded as each starts: a stop shuts the running one down, which Ray Data
# offers no other handle for before its first result.
_executions: list[Any] = []


@functools.cache
def _execution_recorder() -> type:
    """The DataContext execution callback that records each execution as it starts (one class, registered once)."""
    from ray.data._internal.execution.execution_callback import ExecutionCallback

    class Recorder(ExecutionCallback):
        def before_execution_starts(self, executor: Any) -> None:
            _executions.append(executor)

    return Recorder


def forget_executions() -> None:
    """The executions recorded so far ended by themselves: nothing to shut down for them."""
    _executions.clear()


def stop_execution(reader: threading.Thread) -> None:
    """Shut Ray Data's execution down (its replicas' calls in flight are abandoned) and wait for the reading thread
    to end, so that nothing of Ray Data is left running into ray.shutdown()."""
    executions = list(_executions)
    forget_executions()
    for executor in executions:
        try:
            executor.shutdown(force=True)
        except Exception as exc:  # noqa: BLE001 - a stop goes on; ray.shutdown() ends what is left
            log.debug("shutting Ray Data's execution down failed: %s", exc)
    reader.join(timeout=JOIN_SECONDS)
    if reader.is_alive():
        log.warning("Ray Data's reading thread did not end within %g s of the stop; shutting Ray down", JOIN_SECONDS)


def connect(cfg: RayConfig) -> RayConnection:
    """Connect to the cluster ray.address (or RAY_ADDRESS) names, or start a local Ray; connected when this call
    did (not: the caller had connected already, and stays connected), and for a local Ray the reaper that ends its
    processes if the job is killed (Ray's dashboard and runtime-env agents outlive a kill -9 of the driver) and the
    session's own temporary folder."""
    import ray
    import ray._private.auto_init_hook
    import ray.data

    if ray.is_initialized():
        return RayConnection()
    # The address the checks before loading probed (ray.address, else RAY_ADDRESS; None: a local Ray).
    address, _ = job_address(cfg)
    runtime_env = {"env_vars": dict(cfg.env)} if cfg.env else None
    log.info(
        "Ray: %s", f"connecting to {address}" if address else "starting a local Ray (ray.address to use a cluster)"
    )
    # Ray starts any Ray API call's own ray.init when Ray is not up: after the job's ray.shutdown() a late call of
    # Ray Data's would start a second local Ray. This process connects once, here.
    ray._private.auto_init_hook.enable_auto_connect = False
    callbacks = ray.data.DataContext.get_current().custom_execution_callback_classes
    if _execution_recorder() not in callbacks:
        callbacks.append(_execution_recorder())
    connection = RayConnection(connected=True)
    try:
        if not address:
            # Ray starts its workers at niceness 15 more than its raylet (an increment: the raylet and the GCS are
            # the job's children, at its niceness); the replica is the work, so it runs at the job's priority, as a
            # local launch's engine does: 0 more, not the job's niceness again.
            os.environ.setdefault("RAY_worker_niceness", "0")
            # Its own session folder, removed after (by the reaper too, after a kill -9 of the job); short: Ray's
            # socket paths in it must fit in 107 bytes.
            connection.temp_dir = Path(
                tempfile.mkdtemp(prefix=RAY_DIR_PREFIX, dir=os.environ.get("RAY_TMPDIR") or "/tmp")
            )
            connection.reaper = Reaper.start(ipc_dir=connection.temp_dir)
        with _stop_put_off_while_ray_starts():
            ray.init(
                address=address,
                runtime_env=runtime_env,
                include_dashboard=False,
                logging_level=logging.WARNING,
                **({"_temp_dir": str(connection.temp_dir)} if connection.temp_dir else {}),
            )
    except BaseException:
        # A local Ray half started (a stop during ray.init) ends here, with its folder.
        with contextlib.suppress(Exception):
            connection.close()
        raise
    return connection


@contextlib.contextmanager
def _stop_put_off_while_ray_starts() -> Iterator[None]:
    """ray.init sets its own SIGTERM handler, sys.exit(15), over the job's: the job would end with exit status 15 and
    no line, or, the exit raised inside a finalizer of Ray's, print a traceback and go on. While ray.init runs, a stop
    signal is only recorded and Ray's handler is not set; once it returns the job's own handlers are back, and a
    signal that came meanwhile goes to them (the job's stop: exit 143, its line; the caller shuts Ray down)."""
    import ray._private.utils as ray_utils

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    came: list[int] = []
    ray_sets_its_handler = ray_utils.set_sigterm_handler
    ray_utils.set_sigterm_handler = lambda handler: None
    for signum in STOP_SIGNALS:
        signal.signal(signum, lambda signum, frame: came.append(signum))
    try:
        yield
    finally:
        ray_utils.set_sigterm_handler = ray_sets_its_handler
        for signum, previous in saved.items():
            signal.signal(signum, previous)
    if came:
        handler = saved[came[0]]
        if callable(handler):
            handler(came[0], None)
        raise_if_stopped("Ray had started")
        raise StopRequested(f"stopped by {signal.Signals(came[0]).name} while Ray started", came[0])
