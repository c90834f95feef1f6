"""Where ``jobs/serve.py`` listens: the host and port of ``engine.url``, which must be a plain-HTTP URL ending in
vLLM's API path (the same URL the server backend's job then connects to). SGLang's serve command listens there too."""

from __future__ import annotations

from urllib.parse import urlsplit

from specbatch.backends.vllm import vllm_options
from specbatch.config import ConfigError, JobConfig

# vLLM's OpenAI-compatible routes live under this path; jobs/serve.py can only serve engine.url there.
API_PATH = "/v1"


def listen_address(job: JobConfig) -> tuple[str, int]:
    """The host and port ``engine.url`` names: where jobs/serve.py listens and where the job connects."""
    url = vllm_options(job).url
    parts = urlsplit(url)
    try:
        port = parts.port or 80
    except ValueError:
        raise ConfigError(f"engine.url={url} has no valid port: use e.g. http://127.0.0.1:8000/v1") from None
    host = parts.hostname or "127.0.0.1"
    if parts.scheme != "http":
        raise ConfigError(
            f"engine.url={url} is {parts.scheme}: the server jobs/serve.py starts speaks plain HTTP; "
            "use http://<host>:<port>/v1 (put a TLS proxy in front of it for https)"
        )
    if parts.path.rstrip("/") != API_PATH:
        raise ConfigError(
            f"engine.url={url} has the path {parts.path or '/'!r}, but vLLM serves its API under {API_PATH}: "
            f"use engine.url=http://{host}:{port}{API_PATH}"
        )
    return host, port
