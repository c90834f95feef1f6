"""Numba functions of a library compiled once per machine instead of once per process.

vLLM's CPU n-gram proposer (vllm/v1/spec_decode/ngram_proposer.py) is two numba functions, compiled at their first
call and kept in memory only: every process that ran an n-gram engine, or replayed n-gram drafting
(specbatch.prediction), compiled them again. Numba's on-disk cache (what ``cache=True`` would have given them) turns
that into a load: the first call took 1.65-2.0 s compiled and 0.66 s from the cache (AVX-512 EPYC, a fresh process
each), and engine start-up with its warm-up went from 10.3 to 7.3 s (jobs/bench.py --startup). A job of a few rows
is about 20 s, and a sweep, a Slurm array or the test suite starts dozens. The callers that may import vLLM pass
its module here.
"""

from __future__ import annotations

import logging
from types import ModuleType

log = logging.getLogger(__name__)
# The modules already seen: the prediction's replay asks at every turn it replays, a hot path.
_seen: set[str] = set()


def cache_numba_functions(module: ModuleType) -> None:
    """Numba's on-disk cache for the numba functions ``module`` defines, before their first call. The compiled code
    goes where numba puts a cached function's (beside the module's source in its __pycache__, or numba's user-wide
    cache when that is read-only; NUMBA_CACHE_DIR moves it), keyed by the function's source, its argument types and
    the CPU, so machines of other instruction sets that share an install each compile their own. Where numba finds
    no folder it may write, the function compiles in each process as before. Idempotent: a function cached already
    (by this or by its own ``cache=True``) is left as it is."""
    if module.__name__ in _seen:
        return
    _seen.add(module.__name__)
    from numba.core.caching import NullCache
    from numba.core.dispatcher import Dispatcher

    for name, function in vars(module).items():
        if not isinstance(function, Dispatcher) or function.py_func.__module__ != module.__name__:
            continue
        if not isinstance(function._cache, NullCache):
            continue
        try:
            function.enable_caching()
        except RuntimeError as exc:  # numba: "cannot cache function ...: no locator available"
            log.info("%s.%s compiles in this process (numba cannot cache it: %s)", module.__name__, name, exc)
            continue
        log.debug("%s.%s is cached on disk by numba", module.__name__, name)
