"""Is a finished sampled run lossless? The target model scores every sampled token (specbatch.analysis.lossless).

python jobs/check_lossless.py RUN_FOLDER [RUN_FOLDER ...] [--no-mlflow]

For each run: every sample's tokens, teacher-forced through the run's own target in float32 (Hugging Face
transformers, nothing of the engine's path), tested token by token against the distribution its sampler asked for
(temperature, top-k, top-p). Prints the verdict (differs / consistent / too few tokens, with what the run could have
caught), writes RUN_FOLDER/lossless/lossless.json and pit.png (the PIT's deciles against the uniform band), and
logs the verdict to the run's MLflow run (metrics lossless.*, tag lossless, both files). Exit status: 0, or 1
when a run differs, 2 when one could not be checked (not finished, greedy, unreadable, or no model sampled its
tokens: spec=simulate, engine.backend=dummy).
"""

import argparse
import logging
import sys
from pathlib import Path

from specbatch.analysis.lossless.run_check import check_run, log_check
from specbatch.config import ConfigError
from specbatch.run.records.record_files import RecordError
from specbatch.run.status_merge import RunIncompleteError
from specbatch.tracking.store import TrackingUnreachable

log = logging.getLogger("specbatch.analysis.lossless")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="finished sampled run folders (merged or not)")
    parser.add_argument("--no-mlflow", action="store_true", help="do not log the verdict to MLflow")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    status = 0
    for root in args.runs:
        try:
            record = check_run(root)
        except (ConfigError, FileNotFoundError, RecordError, RunIncompleteError) as exc:
            log.error("%s: %s", root, exc)
            status = 2
            continue
        print(f"{root}: {record['verdict']}: {record['why']}")
        try:
            if not args.no_mlflow and not log_check(root, record):
                log.info(
                    "%s has no MLflow run (tracking off, or not in its store): the verdict is in its folder", root
                )
        except TrackingUnreachable as exc:
            log.warning("the verdict is in %s, but not in MLflow: %s", root, exc)
        if record["verdict"] == "differs" and status == 0:
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
