"""The server backend (``engine.backend=server``): the shard's requests go to a running OpenAI-compatible server at
``engine.url``. Its "serve" is pointing at that URL: whatever serves it (``jobs/serve.py`` starts vLLM's server
from the same config). Light: only its options, declared here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from specbatch.common.errors import require
from specbatch.common.masking import SECRET_NAME, mask_uri
from specbatch.config.declarations import Identity, identities
from specbatch.config.engine import backend_options

ENGINE = "specbatch.backends.server.server:ServerEngine"
_FOLDER, _ENGINE, _WORKLOAD = Identity.run_folder, Identity.engine, Identity.workload
# engine.api: completions with the prompt's token ids (the offline job's exact prompts), chat (the server applies
# its own chat template), or auto (completions when the server takes token ids, else chat).
SERVER_APIS = ("auto", "completions", "chat")
DEFAULT_URL = "http://127.0.0.1:8000/v1"


def check_endpoint(url: str, api_key_env: str) -> None:
    """engine.url is an http(s) URL and engine.api_key_env names a secret (so its value is masked everywhere)."""
    require(
        url.startswith(("http://", "https://")),
        f"engine.url={mask_uri(url)!r} is not an http(s) URL: use e.g. {DEFAULT_URL}",
    )
    require(
        bool(SECRET_NAME.search(api_key_env)),
        f"engine.api_key_env={api_key_env} does not look like a secret's name, so its value would not be "
        "masked: name a variable ending in _API_KEY or _TOKEN (e.g. OPENAI_API_KEY)",
    )


@dataclass
class ClientOptions:
    """How the job's requests go to a server: the server backend's, and llama_cpp's, whose requests go the same way."""

    SECTIONS: ClassVar[dict[str, str]] = {}

    # Seconds one attempt of one request may take, and attempts after the first on connection errors, timeouts,
    # 429 and 5xx (with the client's exponential backoff).
    request_timeout_seconds: float = field(default=600.0, metadata=identities())
    retries: int = field(default=3, metadata=identities())

    def __post_init__(self) -> None:
        require(
            self.request_timeout_seconds > 0,
            f"engine.request_timeout_seconds={self.request_timeout_seconds} must be more than 0, e.g. 600",
        )
        require(self.retries >= 0, f"engine.retries={self.retries} must be 0 or more, e.g. 3")


@dataclass
class Options(ClientOptions):
    """The server backend's knobs (and jobs/serve.py's, which listens where url points)."""

    # Base URL of the OpenAI-compatible API. Not in any identity: the same set-up served on another port resumes.
    url: str = field(default=DEFAULT_URL, metadata=identities())
    # Environment variable holding the server's API key (sent as a bearer token; unset: no key). Its name must say
    # it holds a secret, so its value is masked in every file, param, tag and log line.
    api_key_env: str = field(default="OPENAI_API_KEY", metadata=identities())
    # Model name on the server; null: the one model the server lists at /v1/models.
    served_model: str | None = field(default=None, metadata=identities())
    # auto, completions or chat (SERVER_APIS above). In the folder: chat prompts are the server's rendering.
    api: str = field(default="auto", metadata=identities(_FOLDER, _ENGINE, _WORKLOAD))
    # Requests in flight at once (the job's side of the batch; the server's own is its max_num_seqs). Like
    # max_num_seqs, not in the workload: a comparison sets runs at different batch sizes side by side.
    max_concurrency: int = field(default=16, metadata=identities(_FOLDER, _ENGINE))

    def __post_init__(self) -> None:
        super().__post_init__()
        check_endpoint(self.url, self.api_key_env)
        require(self.api in SERVER_APIS, f"engine.api={self.api} is not one of {', '.join(SERVER_APIS)}")
        require(self.max_concurrency >= 1, f"engine.max_concurrency={self.max_concurrency} must be 1 or more, e.g. 16")


def server_options(job: Any) -> Options:
    """The job's server knobs as this backend's Options (checked)."""
    return backend_options(job, Options)
