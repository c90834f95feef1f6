"""Runs jobs/generate.py as a real process whose Parquet writer hits a full disk on its Nth write (for tests).

INJECT_ENOSPC_ON_WRITE=2 python tests/inject_enospc.py <hydra overrides>

The Nth ``pyarrow.parquet.write_table`` call writes a few bytes, as a filling disk would, then raises
OSError(ENOSPC); every other call writes normally. Everything else is the real job.
"""

import errno
import os
import runpy
import sys
from pathlib import Path

import pyarrow.parquet as pq

GENERATE = Path(__file__).resolve().parents[1] / "jobs" / "generate.py"
_real_write_table = pq.write_table
_calls = 0


def _write_until_full(table, where, *args, **kwargs):  # type: ignore[no-untyped-def]
    global _calls
    _calls += 1
    if _calls == int(os.environ["INJECT_ENOSPC_ON_WRITE"]):
        Path(where).write_bytes(b"PAR1 half a file")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(where))
    return _real_write_table(table, where, *args, **kwargs)


pq.write_table = _write_until_full

# vLLM's spawned workers import this file as __mp_main__: only the real main process runs the job.
if __name__ == "__main__":
    sys.argv = [str(GENERATE), *sys.argv[1:]]
    runpy.run_path(str(GENERATE), run_name="__main__")
