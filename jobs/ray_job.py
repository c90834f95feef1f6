"""Print the job as a KubeRay RayJob: jobs/generate.py launcher=ray on a Ray cluster KubeRay starts for it.

python jobs/ray_job.py --print [--image IMAGE] [--name NAME] [hydra overrides]   the RayJob's YAML on stdout, e.g.
    python jobs/ray_job.py --print --image registry/specbatch:v1 model=llama31_8b_instruct spec=eagle3 engine=gpu \
        ray.replicas=2 | kubectl apply -f -

The overrides are those of jobs/generate.py (launcher=ray is added when they choose no launcher) and the job is
composed and checked as it would be, so a mistake stops here. The image must hold this checkout at its working
directory with `make setup` done and the venv's bin first on PATH: KubeRay runs `ray start` in it, and the RayJob's
entrypoint is `python jobs/generate.py ...`, relative to that directory. output_root should be on storage that
outlives the pods (the head writes the run folder; KubeRay deletes the cluster after the job).
"""

import argparse
import logging
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException

from specbatch.cluster.ray_checks import check_runs_on_ray
from specbatch.cluster.ray_manifest import manifest_yaml, rayjob_manifest, with_ray_launcher
from specbatch.config import ConfigError, JobConfig, register_configs, to_job_config
from specbatch.config.overrides import check_overrides
from specbatch.engine import validate_job

log = logging.getLogger("specbatch")
CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
# A placeholder: an image built from this checkout (a stock rayproject/ray image lacks specbatch and its venv).
DEFAULT_IMAGE = "specbatch:latest"
register_configs()


def compose_job(overrides: list[str]) -> JobConfig:
    """The job jobs/generate.py would run with these overrides (same key check, same composition and checks)."""
    check_overrides(overrides, CONF_DIR)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        job = to_job_config(compose(config_name="config", overrides=overrides))
    validate_job(job)
    # What jobs/generate.py launcher=ray refuses, refused here: a RayJob whose job can only fail is no use.
    check_runs_on_ray(job)
    return job


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--print", action="store_true", help="print the RayJob's YAML (for kubectl apply -f -)")
    parser.add_argument(
        "--image", default=DEFAULT_IMAGE, help=f"the pods' image, with this checkout (default: {DEFAULT_IMAGE})"
    )
    parser.add_argument("--name", default=None, help="the RayJob's name (default: specbatch-<spec label>)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, as for jobs/generate.py")
    args = parser.parse_intermixed_args()
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s][%(levelname)s] - %(message)s")
    if not args.print:
        log.error("jobs/ray_job.py only prints the RayJob for now: add --print and pipe it to kubectl apply -f -")
        return 2
    try:
        job = compose_job(with_ray_launcher(args.overrides))
        manifest = rayjob_manifest(job, args.overrides, args.image, args.name)
    except (ConfigError, HydraException) as exc:
        # A mistake in the config: one line, no traceback, exit code 2 like jobs/generate.py.
        log.error("%s", " ".join(str(exc).split()))
        return 2
    print(manifest_yaml(manifest), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
