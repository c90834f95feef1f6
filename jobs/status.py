"""Which shards of a run are done, running, partial or missing.

python jobs/status.py outputs/runs/<dataset>/<model>/<run>
"""

import argparse
import logging
import sys
from pathlib import Path

from specbatch.run.records.record_files import RecordError
from specbatch.run.status_merge import format_status, run_status

log = logging.getLogger("specbatch.status")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_folder", type=Path)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        states = run_status(args.run_folder)
    except (FileNotFoundError, RecordError) as exc:
        log.error("%s", exc)
        return 2
    log.info("%s", format_status(args.run_folder, states))
    # 0 when every shard is done, 1 otherwise: scripts can wait on it.
    return 0 if all(s.state == "done" for s in states) else 1


if __name__ == "__main__":
    sys.exit(main())
