"""The engine group (``engine/``): which backend generates and the knobs that depend on the hardware or server."""

from __future__ import annotations

from dataclasses import dataclass, field

from omegaconf import MISSING

from specbatch.common.errors import require
from specbatch.common.masking import SECRET_NAME, mask_uri
from specbatch.config.declarations import (
    OLD_RUNS_DEFAULT,
    Identity,
    identities,
    llama_cpp_only,
    server_only,
    vllm_only,
)

_FOLDER, _ENGINE, _WORKLOAD = Identity.run_folder, Identity.engine, Identity.workload


# The engine backends, the one table of them: engine.backend's allowed values, each with the class that owns it
# ("module:class", a subclass of specbatch.engine.base.Engine). specbatch.engine imports the class when a job asks for
# it, so the config never imports an engine and choosing dummy never loads vLLM. A new backend is a line here.
BACKENDS: dict[str, str] = {
    "vllm": "specbatch.engine.vllm_offline:VllmEngine",
    "server": "specbatch.engine.server:ServerEngine",
    "llama_cpp": "specbatch.engine.llama_cpp:LlamaCppEngine",
    "dummy": "specbatch.engine.dummy:DummyEngine",
}
# engine.api of the server backend: completions with the prompt's token ids (the offline job's exact prompts), chat
# (the server applies its own chat template), or auto (completions when the server takes token ids, else chat).
SERVER_APIS = ("auto", "completions", "chat")


@dataclass
class EngineConfig:
    """Engine knobs that depend on the hardware (group ``engine/``)."""

    # Preset name, recorded with the run (cpu, gpu, ...).
    name: str = MISSING
    # Which engine generates (specbatch.engine): vllm (offline vllm.LLM), server (a running OpenAI-compatible
    # server at engine.url), llama_cpp (llama.cpp's llama-server, started by the job with model.gguf) or dummy (no
    # model; for tests). Runs written before it existed ran on vLLM.
    backend: str = field(default="vllm", metadata={OLD_RUNS_DEFAULT: "vllm"})
    # Skip CUDA graphs / torch.compile: same outputs, much faster start-up on CPU.
    enforce_eager: bool = True
    # vLLM CPU backend only: KV cache size in GiB (sets VLLM_CPU_KVCACHE_SPACE unless already set).
    cpu_kvcache_space_gib: int | None = None
    # GPU only: share of GPU memory vLLM may take.
    gpu_memory_utilization: float | None = None
    # The batch: requests the engine runs at once (null: vLLM's default). chunk_size does not change it.
    # Not in the workload: a comparison sets runs at different batch sizes side by side.
    max_num_seqs: int | None = field(default=None, metadata=identities(_FOLDER, _ENGINE))
    # Engine seed.
    seed: int = 0
    # One short request before timing, so JIT and first-call costs are not counted as generation time.
    warmup: bool = True
    # vllm backend: run vLLM's engine core and worker in processes of their own (vLLM's default). null: not on a
    # machine without a GPU, where one process measured 4x faster to start and 1.6x the throughput on 2 cores (same
    # tokens; see README "Fast on the CPU you have"), and vLLM's default on a GPU. Left out of the digests while null.
    multiprocessing: bool | None = field(default=None, metadata=vllm_only(_FOLDER, _ENGINE))
    # --- server backend (and jobs/serve.py, which listens where url points) ---
    # Base URL of the OpenAI-compatible API. Not in any identity: the same set-up served on another port resumes.
    url: str = field(default="http://127.0.0.1:8000/v1", metadata=server_only())
    # Environment variable holding the server's API key (sent as a bearer token; unset: no key). Its name must say
    # it holds a secret, so its value is masked in every file, param, tag and log line.
    api_key_env: str = field(default="OPENAI_API_KEY", metadata=server_only())
    # Model name on the server; null: the one model the server lists at /v1/models.
    served_model: str | None = field(default=None, metadata=server_only())
    # auto, completions or chat (SERVER_APIS above). In the folder: chat prompts are the server's rendering.
    api: str = field(default="auto", metadata=server_only(_FOLDER, _ENGINE, _WORKLOAD))
    # Requests in flight at once (the job's side of the batch; the server's own is its max_num_seqs). Like
    # max_num_seqs, not in the workload: a comparison sets runs at different batch sizes side by side.
    max_concurrency: int = field(default=16, metadata=server_only(_FOLDER, _ENGINE))
    # Seconds one attempt of one request may take, and attempts after the first on connection errors, timeouts,
    # 429 and 5xx (with the client's exponential backoff). Also llama_cpp's, whose requests go the same way.
    request_timeout_seconds: float = field(default=600.0, metadata=server_only(backends=("server", "llama_cpp")))
    retries: int = field(default=3, metadata=server_only(backends=("server", "llama_cpp")))
    # --- llama_cpp backend (its batch, the parallel slots, is engine.max_num_seqs) ---
    # The llama-server to start; null: the one `bash jobs/llama_cpp.sh install` built (make test builds it).
    llama_server: str | None = field(default=None, metadata=llama_cpp_only())

    def __post_init__(self) -> None:
        require(
            self.backend in BACKENDS,
            f"engine.backend={self.backend} is not an engine: use one of {', '.join(BACKENDS)}",
        )
        require(
            self.cpu_kvcache_space_gib is None or self.cpu_kvcache_space_gib >= 1,
            f"engine.cpu_kvcache_space_gib={self.cpu_kvcache_space_gib} must be 1 or more, e.g. 2",
        )
        require(
            self.gpu_memory_utilization is None or 0 < self.gpu_memory_utilization <= 1,
            f"engine.gpu_memory_utilization={self.gpu_memory_utilization} must be in (0, 1], e.g. 0.9",
        )
        require(
            self.max_num_seqs is None or self.max_num_seqs >= 1,
            f"engine.max_num_seqs={self.max_num_seqs} must be 1 or more (or null for vLLM's default)",
        )
        require(
            self.url.startswith(("http://", "https://")),
            f"engine.url={mask_uri(self.url)!r} is not an http(s) URL: use e.g. http://127.0.0.1:8000/v1",
        )
        require(
            bool(SECRET_NAME.search(self.api_key_env)),
            f"engine.api_key_env={self.api_key_env} does not look like a secret's name, so its value would not be "
            "masked: name a variable ending in _API_KEY or _TOKEN (e.g. OPENAI_API_KEY)",
        )
        require(self.api in SERVER_APIS, f"engine.api={self.api} is not one of {', '.join(SERVER_APIS)}")
        require(self.max_concurrency >= 1, f"engine.max_concurrency={self.max_concurrency} must be 1 or more, e.g. 16")
        require(
            self.request_timeout_seconds > 0,
            f"engine.request_timeout_seconds={self.request_timeout_seconds} must be more than 0, e.g. 600",
        )
        require(self.retries >= 0, f"engine.retries={self.retries} must be 0 or more, e.g. 3")
