"""Serve the job's model and speculative method with vLLM's OpenAI server, exactly as the job runs it; see README.md.

python jobs/serve.py [hydra overrides]           start the server at engine.url, print a curl and the batch command,
                                                 serve until Ctrl-C or SIGTERM
python jobs/serve.py --print [hydra overrides]   only print the vLLM, NVIDIA Dynamo and SGLang commands
"""

import argparse
import logging
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException

from specbatch.backends.vllm.serve_commands import (
    batch_command,
    curl_example,
    serving_commands,
    vllm_console_script_broken,
)
from specbatch.backends.vllm.vllm_server import VllmServer
from specbatch.config import ConfigError, JobConfig, register_configs, to_job_config
from specbatch.config.dtype import log_dtype_choice
from specbatch.config.overrides import check_overrides
from specbatch.engine import validate_job
from specbatch.pipeline import build_named_head
from specbatch.serving.child_server import ServerStartError

log = logging.getLogger("specbatch")
CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
register_configs()


def compose_job(overrides: list[str]) -> JobConfig:
    """The job jobs/generate.py would run with these overrides (same key check, same composition and checks)."""
    check_overrides(overrides, CONF_DIR)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return to_job_config(compose(config_name="config", overrides=overrides))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--print", action="store_true", help="only print the serve commands, start nothing")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, as for jobs/generate.py")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s][%(levelname)s] - %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per /health poll
    try:
        job = compose_job(args.overrides)
        validate_job(job)
        log_dtype_choice(job.model.dtype_choice)
        if args.print:
            print(serving_commands(job, module=vllm_console_script_broken()))
            return 0
        build_named_head(job)
        server = VllmServer.start(job)
    except (ConfigError, HydraException) as exc:
        # A mistake in the config: one clear message, no traceback, exit code 2 like jobs/generate.py.
        log.error("%s", exc)
        return 2
    except ServerStartError as exc:
        log.error("%s", exc)
        return 1
    with server:
        log.info("serving %s at %s (pid %d, log %s)", job.model.path, server.url, server.pid, server.log_path)
        print(f"# a chat request:\n{curl_example(job)}", flush=True)
        print(f"# a batch of the job's prompts against it:\n{batch_command(args.overrides)}", flush=True)
        log.info("Ctrl-C or SIGTERM stops the server")
        return server.serve_until_signalled()


if __name__ == "__main__":
    sys.exit(main())
