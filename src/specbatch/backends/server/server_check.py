"""What the server backend checks before anything is written: that a server answers at ``engine.url`` (with the
key), which model it serves, and whether its completions API takes the prompt as token ids (``engine.api=auto``).
Each failure is one ConfigError naming the key to change."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import httpx
import openai

from specbatch.backends.server import server_options
from specbatch.backends.server.server_answers import check_same_model
from specbatch.common.masking import mask_uri
from specbatch.config import ConfigError, JobConfig
from specbatch.engine.base import EngineUnavailable

log = logging.getLogger(__name__)

# Seconds the start-up checks may take per request (the server is up or it is not).
CHECK_TIMEOUT = 15.0
# Token ids of the probe that tells whether the completions API takes a prompt as token ids.
PROBE_PROMPT = [1, 2, 3, 4]


class ServerUnreachable(EngineUnavailable):
    """No server answers at engine.url any more (after the client's retries): the shard stops, resumable."""


@dataclass(frozen=True)
class ServerTarget:
    """What the start-up checks found: the model to ask for and the API to use."""

    model: str
    api: str


def api_key(job: JobConfig) -> str:
    """The key from the variable engine.api_key_env names; a placeholder when unset (servers without keys ignore
    it, and the client insists on one). The value is masked in every output: the variable's name says it is secret."""
    return os.environ.get(server_options(job).api_key_env) or "no-key"


def server_root(url: str) -> str:
    """``http://host:port`` of an API base URL (``/health`` and ``/metrics`` live there, not under ``/v1``)."""
    parsed = httpx.URL(url)
    return str(parsed.copy_with(path="/", query=None)).rstrip("/")


def _unreachable(job: JobConfig, why: object) -> ConfigError:
    return ConfigError(
        f"engine.url={mask_uri(server_options(job).url)}: no OpenAI-compatible server answers there ({why}). Start "
        "one "
        "(python jobs/serve.py <the same overrides>) or point engine.url at a running server"
    )


def check_server(job: JobConfig, verify_model: bool = True) -> ServerTarget:
    """Before anything is written: the server answers, the key is accepted, the model is there (and, with
    ``verify_model``, is the job's model), and which API takes the prompts. Each failure is one ConfigError naming
    the key to change."""
    engine = server_options(job)
    client = openai.OpenAI(
        base_url=engine.url, api_key=api_key(job), max_retries=min(engine.retries, 1), timeout=CHECK_TIMEOUT
    )
    try:
        try:
            listed = list(client.models.list())
            served = [m.id for m in listed]
        except openai.APIConnectionError as exc:
            raise _unreachable(job, exc.__cause__ or type(exc).__name__) from None
        except openai.AuthenticationError:
            raise ConfigError(
                f"engine.url={mask_uri(engine.url)} refused the API key: set the variable engine.api_key_env "
                f"names ({engine.api_key_env}) to the server's key"
            ) from None
        except openai.APIStatusError as exc:
            raise _unreachable(job, f"GET /models answered HTTP {exc.status_code}") from None
        model = _pick_model(job, served)
        if verify_model:
            check_same_model(job, model, next((getattr(m, "root", None) for m in listed if m.id == model), None))
        api = engine.api
        if api == "auto":
            api = "completions" if _takes_token_ids(client, model) else "chat"
            log.info("%s takes prompts through the %s API", mask_uri(engine.url), api)
        if api == "chat" and not job.dataset.chat:
            raise ConfigError(
                f"engine.api={engine.api}: the server at {mask_uri(engine.url)} needs the chat API, but the data set "
                "is plain text (dataset.chat=false): use a server whose completions API takes token ids"
            )
        return ServerTarget(model, api)
    finally:
        client.close()


def _pick_model(job: JobConfig, served: list[str]) -> str:
    wanted = server_options(job).served_model
    if wanted is not None:
        if wanted not in served:
            raise ConfigError(
                f"engine.served_model={wanted} is not served at {mask_uri(server_options(job).url)}; it serves: "
                f"{', '.join(served) or 'nothing'}"
            )
        return wanted
    if len(served) != 1:
        raise ConfigError(
            f"the server at {mask_uri(server_options(job).url)} serves {len(served)} models ({', '.join(served)}): "
            "set engine.served_model to one of them"
        )
    return served[0]


def _takes_token_ids(client: openai.OpenAI, model: str) -> bool:
    try:
        client.completions.create(model=model, prompt=PROBE_PROMPT, max_tokens=1)
    except openai.APIStatusError:
        return False
    return True
