"""Compare runs against spec=none on the same prompts: speedup, acceptance, greedy equality, recommended k.

python jobs/compare.py outputs/_hydra/multirun/<date>/<time>     a sweep (python jobs/generate.py -m ...)
python jobs/compare.py RUN_FOLDER [RUN_FOLDER ...]               run folders (or outputs/runs for all of them)
python jobs/compare.py --mlflow-run PARENT_RUN_ID [--tracking-uri sqlite:///outputs/mlflow.db]

Writes comparison.{csv,json,parquet} and PNG plots (beside the sweep, or under <output_root>/comparisons/), prints
the table and logs it all to MLflow (the sweep's parent run when there is one). Repeats of a set-up (-m repeat=0,1,2)
give a mean and a spread.
"""

import argparse
import logging
import os
import sys
from pathlib import Path

from specbatch.analysis.compare import CompareError
from specbatch.analysis.report import find_runs, run_compare, runs_of_parent, serve_commands
from specbatch.analysis.tables import format_comparison
from specbatch.run.status_merge import RunIncompleteError

log = logging.getLogger("specbatch.analysis.compare")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path, help="run folders, sweep folders or outputs/runs")
    parser.add_argument("--mlflow-run", help="the MLflow parent run of a sweep, instead of paths")
    parser.add_argument(
        "--tracking-uri",
        default=os.environ.get("MLFLOW_TRACKING_URI", "sqlite:///outputs/mlflow.db"),
        help="MLflow store of --mlflow-run (default: $MLFLOW_TRACKING_URI or the default store)",
    )
    parser.add_argument("--out", type=Path, help="where to write the comparison (default: beside the sweep)")
    parser.add_argument("--no-mlflow", action="store_true", help="do not log the comparison to MLflow")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if bool(args.paths) == bool(args.mlflow_run):
        parser.error("pass either paths or --mlflow-run")
    try:
        sources = runs_of_parent(args.tracking_uri, args.mlflow_run) if args.mlflow_run else find_runs(args.paths)
        result = run_compare(sources, args.out, log_to_mlflow=not args.no_mlflow)
    except (CompareError, RunIncompleteError, FileNotFoundError) as exc:
        log.error("%s", exc)
        return 2
    print(format_comparison(result.comparison))
    # How to serve each winner, built from its run's recorded config.
    for line in serve_commands(result.comparison):
        print(line)
    print(f"\nwritten to {result.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
