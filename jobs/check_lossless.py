"""Is a finished sampled run lossless? The target model scores every sampled token (specbatch.analysis.lossless).

python jobs/check_lossless.py RUN_FOLDER [RUN_FOLDER ...]

For each run: every sample's tokens, teacher-forced through the run's own target in float32 (Hugging Face
transformers, nothing of the engine's path), tested token by token against the distribution its sampler asked for
(temperature, top-k, top-p). Prints the verdict (differs / consistent / too few tokens, with what the run could have
caught) and writes RUN_FOLDER/lossless/lossless.json. Exit status: 0, or 1 when a run differs, 2 when one could not
be checked (not finished, greedy, unreadable).
"""

import argparse
import logging
import sys
from pathlib import Path

from specbatch.analysis.lossless.run_check import check_run
from specbatch.config import ConfigError
from specbatch.run.records.record_files import RecordError
from specbatch.run.status_merge import RunIncompleteError

log = logging.getLogger("specbatch.analysis.lossless")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="finished sampled run folders (merged or not)")
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
        if record["verdict"] == "differs" and status == 0:
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
