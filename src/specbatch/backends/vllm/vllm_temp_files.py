"""Where an offline vLLM engine's temp files go: a folder of its own (IPC sockets, its processes' temp files, the
torch rendezvous file ``vllm_dist_<hex>``), so that closing the engine removes them, and after a kill the reaper
or the next engine's start (specbatch.serving.reaper.remove_dead_ipc_dirs); nothing of another process is touched.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from specbatch.backends.vllm.vllm_args import use_ipc_dir
from specbatch.serving.reaper import make_ipc_dir


def private_ipc_dir(sockets: bool) -> Path:
    """A folder of this engine's own for its processes' temp files and, with ``sockets`` (an engine core in a process
    of its own), vLLM's IPC sockets (VLLM_RPC_BASE_PATH, unless the user chose where they go), so that closing the
    engine, or after a kill the reaper or the next start (specbatch.serving.reaper.remove_dead_ipc_dirs), removes
    them. An engine in this process has no sockets: the variable would only outlive it, and be taken for this job's
    own when the user exports one later in the process (a test, a notebook)."""
    path = make_ipc_dir()
    if sockets:
        use_ipc_dir(str(path))
    return path


@contextlib.contextmanager
def temp_dir_of_new_processes(path: Path | None) -> Iterator[None]:
    """TMPDIR is ``path`` for the processes started meanwhile (vLLM spawns its engine core and workers on CPU, and a
    spawned process reads TMPDIR when it starts), so their torch rendezvous file goes into the engine's own folder.
    This process keeps its temp folder: tempfile reads TMPDIR once, and that is done before the change."""
    if path is None:
        yield
        return
    tempfile.gettempdir()
    before = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(path)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = before


@contextlib.contextmanager
def rendezvous_in(path: Path | None) -> Iterator[None]:
    """vLLM's executor for an engine in this process names its torch rendezvous file ``file://<temp>/vllm_dist_<hex>``
    with ``get_file_store_init_method`` (vllm/utils/network_utils.py, imported by name into
    vllm/v1/executor/uniproc_executor.py), in this process's temp folder, which a TMPDIR set now no longer moves. For
    the while of the build the same name goes into ``path``, the engine's own folder. None: left as it is."""
    try:
        from vllm.v1.executor import uniproc_executor
    except ImportError:  # another vLLM layout: the file stays where vLLM puts it (tests/engine say so)
        uniproc_executor = None
    made = getattr(uniproc_executor, "get_file_store_init_method", None)
    if path is None or made is None:
        yield
        return

    def in_engine_folder() -> str:
        return f"file://{path}/{Path(made().removeprefix('file://')).name}"

    uniproc_executor.get_file_store_init_method = in_engine_folder
    try:
        yield
    finally:
        uniproc_executor.get_file_store_init_method = made
