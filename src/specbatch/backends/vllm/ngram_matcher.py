"""vLLM's n-gram matcher compiled once per machine instead of once per process.

vLLM's CPU n-gram proposer (vllm/v1/spec_decode/ngram_proposer.py) is two numba functions, compiled at their first
call and kept in memory only: every process that runs an n-gram engine, or replays n-gram drafting
(specbatch.prediction), compiled them again. Numba's on-disk cache (what ``cache=True`` would give them) turns that
into a load: the first call took 1.65-2.0 s compiled and 0.66 s from the cache (AVX-512 EPYC, a fresh process
each). A job of a few rows is about 20 s, and a sweep, a Slurm array or the test suite starts dozens.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

# vLLM 0.32's numba functions: the batch matcher its proposer calls, and the matcher it calls per request (which the
# prediction's replay calls itself).
FUNCTIONS = ("batch_propose_numba", "_find_longest_matched_ngram_and_propose_tokens")


def cache_ngram_matcher() -> None:
    """Numba's on-disk cache for vLLM's n-gram functions, before their first call. The compiled code goes where
    numba puts a cached function's (beside vLLM's source in its __pycache__, or numba's user-wide cache when that is
    read-only; NUMBA_CACHE_DIR moves it), keyed by the function's source, its argument types and the CPU, so machines
    of other instruction sets that share an install each compile their own. Idempotent; nothing without vLLM's CPU
    n-gram proposer."""
    try:
        from numba.core.caching import NullCache
        from numba.core.dispatcher import Dispatcher
        from vllm.v1.spec_decode import ngram_proposer
    except ImportError:
        return
    for name in FUNCTIONS:
        function = getattr(ngram_proposer, name, None)
        # A vLLM whose functions are gone or cached already is left as it is.
        if isinstance(function, Dispatcher) and isinstance(function._cache, NullCache):
            function.enable_caching()
            log.debug("vLLM's n-gram function %s is cached on disk by numba", name)
