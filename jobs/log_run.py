"""Log a finished run folder to MLflow after the fact (e.g. the tracking server was down while it ran).

python jobs/log_run.py RUN_FOLDER [--tracking-uri URI] [--all]

By default only shards whose logging failed (run folder's mlflow_pending/) are logged; --all logs every finished
shard (e.g. a run made with tracking=off, with --tracking-uri). Exits 1 if the store still cannot be reached.
"""

import argparse
import logging
import sys
from pathlib import Path

from specbatch.common.masking import mask_text
from specbatch.tracking.run_contents import log_pending

log = logging.getLogger("specbatch.log_run")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_folder", type=Path)
    parser.add_argument("--tracking-uri", help="log here instead of the URI the run recorded")
    parser.add_argument("--all", action="store_true", help="every finished shard, not only the pending ones")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        logged = log_pending(args.run_folder, args.tracking_uri, every_shard=args.all)
    except FileNotFoundError as exc:
        log.error("%s", exc)
        return 2
    except Exception as exc:  # noqa: BLE001 - one line naming the cause; nothing was marked logged
        log.error("could not log %s: %s: %s", args.run_folder, type(exc).__name__, mask_text(str(exc)))
        return 1
    if logged:
        log.info("%d shard run(s) logged", len(logged))
    else:
        log.info("nothing pending in %s (--all logs every finished shard)", args.run_folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
