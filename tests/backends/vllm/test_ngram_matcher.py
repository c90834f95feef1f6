"""vLLM's n-gram matcher is compiled by the first process that calls it and loaded from numba's cache by the next
(specbatch.common.numba_cache), through the prediction's replay as a fresh process runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import json, numpy as np
from specbatch.prediction.replay import replay
from specbatch.prediction.setups import NgramSetup
from specbatch.prediction.turns import ReplayTurn
from vllm.v1.spec_decode import ngram_proposer
turn = ReplayTurn("r", 1, 0, None, np.array([1, 2, 3, 1, 2], np.int32), np.array([3, 1, 2], np.int32), (0, 0, 0),
    (0, 0, 0))
drafts = replay([turn], NgramSetup(2, 1, 2), 2048)[0][1].drafts
stats = ngram_proposer._find_longest_matched_ngram_and_propose_tokens.stats
hits, misses = sum(stats.cache_hits.values()), sum(stats.cache_misses.values())
print(json.dumps({"drafts": drafts, "hits": hits, "misses": misses}))
"""


def test_the_first_process_compiles_the_matcher_and_the_next_loads_it(tmp_path: Path) -> None:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    runs = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(json.loads(done.stdout.splitlines()[-1]))
    first, second = runs
    assert first["misses"] > 0 and first["hits"] == 0, first
    assert list(tmp_path.rglob("*.nbi")), "the compiled matcher is on disk"
    assert second["hits"] > 0 and second["misses"] == 0, second
    assert first["drafts"] == second["drafts"] == 1


def test_with_no_folder_numba_may_write_the_matcher_compiles_as_before(monkeypatch) -> None:
    # As on a read-only install without a writable home: no locator finds a folder, and the job goes on.
    from numba.core import caching
    from numba.core.caching import NullCache

    from specbatch.common import numba_cache

    monkeypatch.setattr(caching.CacheImpl, "_locator_classes", [])
    module = type(sys)("planted_numba_module")
    exec("from numba import njit\n@njit\ndef twice(x):\n    return 2 * x\n", module.__dict__)
    numba_cache.cache_numba_functions(module)
    assert isinstance(module.twice._cache, NullCache) and module.twice(21) == 42
