"""Merge a finished run: check every shard is done, write merged/manifest.json and merged/summary.json
(figures added up from the shards' counts), and log them to MLflow as the parent of the shards' runs.

    python jobs/merge.py outputs/runs/<dataset>/<model>/<run> [--no-mlflow]
"""

import argparse
import logging
import sys
from pathlib import Path

from specbatch.pipeline import merge_run
from specbatch.run.records.record_files import RecordError
from specbatch.run.status_merge import RunIncompleteError

log = logging.getLogger("specbatch.merge")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_folder", type=Path)
    parser.add_argument("--no-mlflow", action="store_true", help="write the merged files only")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        result = merge_run(args.run_folder, log_to_mlflow=not args.no_mlflow)
    except (RunIncompleteError, FileNotFoundError, RecordError) as exc:
        log.error("%s", exc)
        return 2
    log.info("manifest: %s", result.manifest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
