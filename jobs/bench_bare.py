"""A bare vLLM script: the reference `jobs/bench.py` measures the job against (not part of the job).

    python jobs/bench_bare.py SPEC.json OUT.json

What SPEC.json holds and what OUT.json gets: see src/specbatch/bench/bare.py. No Hydra, Parquet or MLflow, on purpose.
"""

import sys

from specbatch.bench.bare import run

if __name__ == "__main__":
    sys.exit(run(sys.argv[1], sys.argv[2]))
