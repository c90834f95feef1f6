"""A head's acceptance per draft position on exported runs, without an engine (a minute, where vLLM takes several).

python jobs/eval_drafter.py HEAD DATA [DATA ...] [--k 3] [--max-sequences N]

HEAD is a folder jobs/train_drafter.py (or speculators) wrote; DATA are exports (jobs/export_drafter_data.py) of
float32 greedy runs of its target that it was not trained on. Prints the acceptance at each draft position and the
mean tokens a step would give (specbatch.drafter.evaluate says how it relates to a run's AL).
"""

import argparse
import logging
import sys
from pathlib import Path

from specbatch.config import ConfigError
from specbatch.drafter.evaluate import evaluate_head

log = logging.getLogger("specbatch.drafter")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("head", type=Path)
    parser.add_argument("data", nargs="+", type=Path)
    parser.add_argument("--k", type=int, default=3, help="draft tokens a step")
    parser.add_argument("--max-sequences", type=int, default=None, help="the data's first N sequences only")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        result = evaluate_head(args.head, args.data, args.k, args.max_sequences)
    except ConfigError as exc:
        log.error("%s", exc)
        return 2
    per_position = ", ".join(f"{a:.3f}" for a in result.accepted)
    log.info(
        "%s on %d sequences (%d generated positions), k %d: acceptance per position %s; AL %.3f",
        args.head,
        result.sequences,
        result.positions,
        args.k,
        per_position,
        result.acceptance_length,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
