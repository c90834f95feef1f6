"""The vllm backend (``engine.backend=vllm``, the default): an offline ``vllm.LLM`` in the job's process, and
``vllm serve`` / NVIDIA Dynamo as the commands that serve the same set-up (``jobs/serve.py``). Light: only its
options, declared here; ``vllm_offline`` imports vLLM when a job runs on it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from specbatch.backends.server import DEFAULT_URL, check_endpoint
from specbatch.common.errors import require
from specbatch.config.declarations import Identity, absent_when_null, every_backend, identities
from specbatch.config.engine import backend_options

ENGINE = "specbatch.backends.vllm.vllm_offline:VllmEngine"
_FOLDER, _ENGINE = Identity.run_folder, Identity.engine


@dataclass
class Options:
    """vLLM's knobs: the engine's, and where ``jobs/serve.py`` serves it."""

    SECTIONS: ClassVar[dict[str, str]] = {}

    # Skip CUDA graphs / torch.compile: same outputs, much faster start-up on CPU. The engine presets (cpu, gpu)
    # set this and the next two for every backend, and every backend's digests have always counted them.
    enforce_eager: bool = field(default=True, metadata=every_backend())
    # vLLM CPU backend only: KV cache size in GiB (sets VLLM_CPU_KVCACHE_SPACE unless already set).
    cpu_kvcache_space_gib: int | None = field(default=None, metadata=every_backend())
    # GPU only: share of GPU memory vLLM may take.
    gpu_memory_utilization: float | None = field(default=None, metadata=every_backend())
    # Run vLLM's engine core and worker in processes of their own (vLLM's default). null: not on a machine without
    # a GPU, where one process measured 4x faster to start and 1.6x the throughput on 2 cores (same tokens; see
    # docs/cpu.md), and vLLM's default on a GPU. Left out of the digests while null.
    multiprocessing: bool | None = field(default=None, metadata=absent_when_null(_FOLDER, _ENGINE))
    # Where jobs/serve.py listens (the server backend's engine.url, so the job it prints connects there), the API
    # key it serves with (the variable's name) and the name it serves the model under. In no identity.
    url: str = field(default=DEFAULT_URL, metadata=identities())
    api_key_env: str = field(default="OPENAI_API_KEY", metadata=identities())
    served_model: str | None = field(default=None, metadata=identities())

    def __post_init__(self) -> None:
        require(
            self.cpu_kvcache_space_gib is None or self.cpu_kvcache_space_gib >= 1,
            f"engine.cpu_kvcache_space_gib={self.cpu_kvcache_space_gib} must be 1 or more, e.g. 2",
        )
        require(
            self.gpu_memory_utilization is None or 0 < self.gpu_memory_utilization <= 1,
            f"engine.gpu_memory_utilization={self.gpu_memory_utilization} must be in (0, 1], e.g. 0.9",
        )
        check_endpoint(self.url, self.api_key_env)


def vllm_options(job: Any) -> Options:
    """The job's vLLM knobs as this backend's Options (checked). Also for the backends that stand in for vLLM or
    are served by it (server, dummy): their vLLM knobs are the presets' values."""
    return backend_options(job, Options)
