"""Generate completions for a data set with a vLLM speculative decoding method; see README.md.

python jobs/generate.py [hydra overrides]         e.g. spec=suffix max_samples=32 model.dtype=float32
python jobs/generate.py --cfg job                  print the composed config
"""

import atexit
import gc
import logging
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from specbatch.common.collector import pause_for_start
from specbatch.common.interrupts import StopRequested, leave_the_jobs_process_group, stop_signals_raise
from specbatch.common.masking import mask_text
from specbatch.config import ConfigError, register_configs, to_job_config
from specbatch.config.overrides import check_overrides
from specbatch.engine import EngineUnavailable
from specbatch.pipeline import run_job, stop_after_job
from specbatch.run.folder import RunFolder
from specbatch.run.locks import ShardBusyError
from specbatch.run.multirun import current_sweep_job, record_job_run

log = logging.getLogger("specbatch")
CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
register_configs()


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    sweep = job = None
    try:
        try:
            sweep = current_sweep_job()
            if sweep:
                cfg = sweep.drop_foreign_knobs(cfg)
            job = to_job_config(cfg)
            with stop_signals_raise():
                result = run_job(job, sweep=sweep)
            record_job_run(result.folder.root)
        except BaseException as exc:
            if sweep and job:  # compare names the set-up this job did not finish (and repeats none of it)
                why = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
                record_job_run(RunFolder.for_job(job).root, failed=mask_text(why))
            raise
        # A signal that came once the shard's last chunks were admitted: the job ends here, no next job begins.
        stop_after_job(result, sweep)
    except ConfigError as exc:
        # A mistake in the config or input: one clear line, no traceback, exit code 2 like a usage error.
        log.error("%s", exc)
        sys.exit(2)
    except ShardBusyError as exc:
        # Another live task is writing this shard (e.g. a duplicate submission): leave it alone.
        log.error("%s", exc)
        sys.exit(3)
    except EngineUnavailable as exc:
        # A server that stopped answering: what it says names engine.url; finished chunks are kept.
        log.error("%s", exc)
        sys.exit(1)
    except StopRequested as exc:
        # SIGTERM (143) or SIGINT (130): every chunk written is whole; a non-zero exit tells Slurm the shard is not
        # done.
        log.warning("%s", exc)
        sys.exit(exc.exit_code)
    except OSError as exc:
        # A full disk, a vanished folder, a name too long: finished chunks are on disk, the half-written one was
        # removed; the line says what to change.
        log.error("%s", RunFolder.describe_os_error(exc))
        sys.exit(1)


# vLLM starts its engine processes with spawn, which re-imports this file as __mp_main__: only the guarded part
# may run the job.
if __name__ == "__mp_main__":
    leave_the_jobs_process_group()
if __name__ == "__main__":
    try:
        # Before Hydra composes: its answer to a typo is "use +key=...", which would then be silently dropped.
        check_overrides(sys.argv[1:], CONF_DIR)
    except ConfigError as exc:
        logging.basicConfig(format="[%(asctime)s][%(name)s][%(levelname)s] - %(message)s")
        log.error("%s", exc)
        sys.exit(2)
    # At exit the interpreter's garbage collector walks the whole heap (torch, vLLM, MLflow: 2-3 s) though the
    # job's files are written and its engine stopped; frozen objects are skipped. Exit handlers (vLLM's, MLflow's,
    # logging's flush) still run as before; only the collector's final passes go.
    atexit.register(gc.freeze)
    # Until the engine is up (specbatch.common.collector says why).
    pause_for_start()
    main()
