"""Reading an OpenAI-compatible server's answers: whether the model it lists is the job's, the completions in
them, what their HTTP errors say, and the per-request speculative figures a vLLM server adds. What is not a usable
completion raises MalformedAnswer, which the server backend turns into an error row for that request alone."""

from __future__ import annotations

from typing import Any

import openai

from specbatch.backends.server import server_options
from specbatch.common.masking import mask_uri
from specbatch.config import ConfigError, JobConfig
from specbatch.engine.spec_metrics import RowSpecFigures, acceptance_length


class MalformedAnswer(ValueError):
    """The server answered 200 with something that is not a usable completion."""


# Besides 5xx: statuses that say the server (or a proxy before it) could not take the request now, not that the
# row is wrong. The client retried them engine.retries times already.
SERVER_AT_FAULT = (408, 429)


def checked_choices(response: Any, n: int) -> list[Any]:
    """Exactly ``n`` choices, or MalformedAnswer saying what came instead (``n`` per request: one per sample)."""
    choices = getattr(response, "choices", None)
    if not isinstance(choices, list):
        shown = response[:80] if isinstance(response, str) else type(response).__name__
        raise MalformedAnswer(f"no choices in it ({shown!r})")
    if len(choices) != n:
        raise MalformedAnswer(f"{len(choices)} choices for sampling.n={n}")
    return choices


def status_error(exc: openai.APIStatusError) -> str:
    body = exc.body if isinstance(exc.body, dict) else {}
    message = body.get("message") or (body.get("error") or {}).get("message") if body else None
    return f"the server answered HTTP {exc.status_code}: {mask_uri(str(message or exc.message))}"


def row_figures(response: Any) -> RowSpecFigures | None:
    """Per-request figures a vLLM server puts in its response (``metrics.speculative_decoding``, with
    ``--per-request-spec-decode-metrics``); None when the response carries none."""
    metrics = getattr(response, "metrics", None)
    spec = metrics.get("speculative_decoding") if isinstance(metrics, dict) else None
    if not spec:
        return None
    steps, accepted = int(spec["num_spec_steps"]), int(spec["num_accepted_draft_tokens"])
    # AL computed as the offline backend computes it (the server's own mean is the same ratio, rounded).
    return RowSpecFigures(
        spec_steps=steps,
        draft_tokens=int(spec["num_draft_tokens"]),
        accepted_tokens=accepted,
        acceptance_length=acceptance_length(accepted, steps),
        acceptance_histogram=[int(x) for x in spec["acceptance_histogram"]],
    )


def _model_names(path_or_id: str) -> set[str]:
    """How a model may be named: its path or hub id as given, and its last part (a server started with a folder
    lists that folder; one started with a hub id lists the id), compared without case."""
    name = path_or_id.rstrip("/")
    return {name.lower(), name.rsplit("/", 1)[-1].lower()} - {""}


def check_same_model(job: JobConfig, served: str, root: str | None) -> None:
    """The served model is the job's (by its id or, as vLLM lists it, its root path), or the user named it
    (engine.served_model): otherwise rows of another model would be stored under this job's model, and a resume
    against another server would mix two models in one run."""
    if server_options(job).served_model is not None:
        return
    if _model_names(job.model.path) & (_model_names(served) | _model_names(root or "")):
        return
    raise ConfigError(
        f"the server at {mask_uri(server_options(job).url)} serves {served}"
        + (f" (from {root})" if root and root != served else "")
        + f", not this job's model.path={job.model.path}: point engine.url at a server of that model, or, if it is "
        f"the same model under another name, set engine.served_model={served}"
    )
