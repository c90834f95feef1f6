"""Where MLflow data goes, and the one place that opens a client on it.

Every MLflow client of the package comes from ``new_client``, so each gets the same preparation: the folder of a
sqlite store exists, and a tracking server that is down makes a call fail after a few seconds instead of MLflow's
own minutes of retries. URIs recorded in run folders (with their password masked) are turned back into usable ones
here, and errors are cut to one masked line here, so no log line carries a credential.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from specbatch.common.masking import MASK, mask_text
from specbatch.config import TrackingConfig

EXPERIMENT_KIND_TAG = "mlflow.experimentKind"


class TrackingUnreachable(RuntimeError):
    """The store could not be reached or did not answer as expected; the message is one masked line."""


def error_line(exc: BaseException) -> str:
    """The first line of an error's message with credentials masked, cut to 300 characters ("" for no message)."""
    lines = mask_text(str(exc)).splitlines()
    return lines[0][:300] if lines else ""


def unreachable(exc: BaseException) -> TrackingUnreachable:
    """``exc`` as a TrackingUnreachable saying ``<type>: <first masked line>``; raise it ``from exc``."""
    return TrackingUnreachable(f"{type(exc).__name__}: {error_line(exc)}")


def _sqlite_db(uri: str) -> Path | None:
    """The database file of a sqlite:/// store URI, or None for any other store."""
    return Path(uri[len("sqlite:///") :]).resolve() if uri.startswith("sqlite:///") else None


def default_artifact_location(uri: str) -> str | None:
    """For a sqlite store, keep artifacts beside the database instead of in ./mlruns of whatever the cwd is."""
    db = _sqlite_db(uri)
    return (db.parent / "mlartifacts").as_uri() if db else None


def _prepare_store(uri: str) -> None:
    db = _sqlite_db(uri)
    if db:
        db.parent.mkdir(parents=True, exist_ok=True)


def recorded_tracking(plain: dict[str, Any], uri: str | None = None) -> TrackingConfig:
    """The tracking config a run folder recorded (run.json), for logging to it later.

    ``uri`` (or MLFLOW_TRACKING_URI) replaces the recorded URI when given. A recorded URI whose password was masked
    needs one of them, or MLFLOW_TRACKING_PASSWORD: then the URI is used without its user info and the user name goes
    to MLflow in MLFLOW_TRACKING_USERNAME (unless that is set already), the way MLflow's own basic auth takes them.
    """
    fields = {k: v for k, v in plain.items() if k in TrackingConfig.__dataclass_fields__}
    recorded = str(fields.get("uri", ""))
    masked = MASK in recorded
    uri = uri or (os.environ.get("MLFLOW_TRACKING_URI") if masked else None)
    if uri:
        fields["uri"] = uri
    elif masked:
        fields["uri"] = _uri_for_env_password(recorded)
    return TrackingConfig(**fields)


def _uri_for_env_password(recorded: str) -> str:
    """``http://user:***@host:5000`` → ``http://host:5000``, with ``user`` in MLFLOW_TRACKING_USERNAME.

    The user info must go: requests turns a user and password in a URL (here ``***``) into its own Authorization
    header, which replaces the one MLflow builds from MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD.
    """
    parts = urlsplit(recorded)
    if not (os.environ.get("MLFLOW_TRACKING_PASSWORD") and parts.password == MASK and parts.username):
        raise ValueError(
            f"the run recorded tracking.uri={recorded} with its password masked: pass the URI again "
            "(--tracking-uri or MLFLOW_TRACKING_URI), or put the password in MLFLOW_TRACKING_PASSWORD"
        )
    os.environ.setdefault("MLFLOW_TRACKING_USERNAME", unquote(parts.username))
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def new_client(cfg: TrackingConfig) -> Any:
    """An ``MlflowClient`` on ``cfg.uri``: the only place the package creates one."""
    from mlflow.tracking import MlflowClient

    _prepare_store(cfg.uri)
    if cfg.uri.startswith(("http://", "https://")):
        # MLflow's own defaults retry for minutes against a dead server; a batch job should give up sooner and go
        # on without it. Values set in the environment win.
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", str(cfg.http_retries))
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(cfg.http_timeout_seconds))
    return MlflowClient(tracking_uri=cfg.uri)


def open_client(cfg: TrackingConfig, client: Any = None) -> tuple[Any, str]:
    """A client on the configured store (``client``, made by new_client beforehand, or a new one) and the id of the
    configured experiment (created if needed)."""
    client = client or new_client(cfg)
    experiment = client.get_experiment_by_name(cfg.experiment)
    if experiment is not None:
        return client, experiment.experiment_id
    location = cfg.artifact_location or default_artifact_location(cfg.uri)
    # MLflow 3's UI opens an untyped experiment in its GenAI view (traces, evaluation runs); ours are metric runs,
    # so mark the experiment as model development: the UI then shows the runs table with metric columns.
    tags = {EXPERIMENT_KIND_TAG: "custom_model_development"}
    return client, client.create_experiment(cfg.experiment, artifact_location=location, tags=tags)


def children_of(client: Any, experiment_id: str, parent_run_id: str) -> list[Any]:
    """The runs nested under ``parent_run_id`` in one experiment."""
    return client.search_runs([experiment_id], filter_string=f"tags.mlflow.parentRunId = '{parent_run_id}'")
