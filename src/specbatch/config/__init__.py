"""The job's configuration: typed schemas checked at compose time, and the Hydra groups that fill them.

``specbatch.config`` is the import every other package uses; the modules behind it are an implementation detail:
ConfigError (from specbatch.common.errors), the speculative methods and their labels (from specbatch.methods),
``spec`` (the spec section), ``progress`` (how a shard shows its progress), ``schema`` (the other sections, the
job, and the identities its fields declare), ``engine`` (the neutral engine section, and how each backend's own
knobs, declared in its folder, join the sections), ``compose`` (Hydra registration, the key check and the refusal of
another backend's knob), ``serialise`` (plain data and YAML) and ``identity`` (run folder, engine and workload
digests).
"""

from specbatch.common.errors import ConfigError
from specbatch.config.compose import (
    check_known_keys,
    compose_job,
    job_schema,
    register_configs,
    schema_keys,
    to_job_config,
    unknown_key_message,
)
from specbatch.config.declarations import Identity
from specbatch.config.engine import DEFAULT_BACKEND, EngineConfig, backend_names
from specbatch.config.identity import (
    engine_identity,
    identity_fields,
    run_folder_config,
    run_folder_digest,
    workload_config,
    workload_digest,
)
from specbatch.config.progress import ProgressConfig, ProgressDisplay
from specbatch.config.ray_launch import RayConfig
from specbatch.config.sampling import SamplingConfig, sample_seed
from specbatch.config.schema import (
    DataFormat,
    DatasetConfig,
    JobConfig,
    ModelConfig,
    PromptFormat,
    ShardConfig,
    TrackingConfig,
    groups,
)
from specbatch.config.serialise import public_config, to_plain_dict, to_yaml
from specbatch.config.spec import SpecConfig
from specbatch.methods import (
    CHECKPOINT_KIND,
    CHECKPOINT_METHODS,
    METHODS,
    Method,
    SpecMethod,
    spec_caption,
    spec_label,
)

__all__ = [
    "DEFAULT_BACKEND",
    "backend_names",
    "CHECKPOINT_KIND",
    "CHECKPOINT_METHODS",
    "groups",
    "job_schema",
    "METHODS",
    "ConfigError",
    "DataFormat",
    "DatasetConfig",
    "EngineConfig",
    "Identity",
    "JobConfig",
    "Method",
    "ModelConfig",
    "ProgressConfig",
    "RayConfig",
    "ProgressDisplay",
    "PromptFormat",
    "SamplingConfig",
    "ShardConfig",
    "SpecConfig",
    "SpecMethod",
    "TrackingConfig",
    "check_known_keys",
    "compose_job",
    "engine_identity",
    "identity_fields",
    "public_config",
    "register_configs",
    "run_folder_config",
    "run_folder_digest",
    "sample_seed",
    "schema_keys",
    "spec_caption",
    "spec_label",
    "to_job_config",
    "to_plain_dict",
    "to_yaml",
    "unknown_key_message",
    "workload_config",
    "workload_digest",
]
