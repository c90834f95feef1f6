"""Keeping secrets out of everything a run writes: MLflow params, tags and artifacts, Parquet metadata, run.json.

Two kinds are masked: credentials inside URIs (``https://user:pw@host`` → ``https://user:***@host``, a token as the
user name or behind an empty one, ``?api_key=...``-style query parameters), and the values of
environment variables that hold credentials (HF_TOKEN, MLFLOW_TRACKING_PASSWORD, ...) wherever they appear in a
text, e.g. a token pasted into a hub URL or a template. The live config keeps the real values (the job needs them to
connect); only what is written goes through here.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from typing import Any

MASK = "***"
# Known credential variables, plus any variable whose name says it is one.
SECRET_ENV_VARS = (
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "HUGGINGFACE_TOKEN",
    "MLFLOW_TRACKING_PASSWORD",
    "MLFLOW_TRACKING_TOKEN",
    "MLFLOW_TRACKING_CLIENT_CERT_PATH",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AZURE_STORAGE_ACCESS_KEY",
    "AZURE_STORAGE_CONNECTION_STRING",
    "DATABRICKS_TOKEN",
    "WANDB_API_KEY",
)
SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|ACCESS_KEY|PRIVATE_KEY|CREDENTIAL)", re.IGNORECASE)
# scheme://userinfo@host — everything up to the last @ before the host. A user:password keeps its user name; a
# userinfo without a colon is masked whole (a token given as the user name, as some proxies take it), and so is an
# empty user name's password (http://:pw@host). Hydra's own log lines escape the colons of an override
# (http\://user\:pw@host), so a backslash before them is allowed.
_URI_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*\\?://)(?P<userinfo>[^\s/?#]+)@")
# ?api_key=..., &token=..., ;sig=...: query parameters whose name says they carry a credential.
_SECRET_QUERY = re.compile(
    r"(?P<head>[?&;][\w.\-]*(?:token|key|secret|password|passwd|pwd|auth|signature|sig|credential)[\w.\-]*\\?=)"
    r"(?P<value>[^&#;\s]+)",
    re.IGNORECASE,
)
# Values shorter than this are not masked on their own: "1" or "true" in a variable would mask half the config.
_MIN_SECRET_LENGTH = 6


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """Values of the environment's credential variables, longest first (so a value containing another wins)."""
    env = os.environ if environ is None else environ
    values = {
        value
        for name, value in env.items()
        if (name in SECRET_ENV_VARS or SECRET_NAME.search(name)) and len(value) >= _MIN_SECRET_LENGTH
    }
    return sorted(values, key=len, reverse=True)


def _masked_userinfo(match: re.Match[str]) -> str:
    user, colon, _ = match["userinfo"].partition(":")
    return f"{match['head']}{user}:{MASK}@" if colon else f"{match['head']}{MASK}@"


def mask_text(text: str, environ: Mapping[str, str] | None = None) -> str:
    masked = _URI_USERINFO.sub(_masked_userinfo, text)
    masked = _SECRET_QUERY.sub(lambda m: m["head"] + MASK, masked)
    for value in secret_values(environ):
        masked = masked.replace(value, MASK)
    return masked


def mask_uri(uri: str) -> str:
    """A URI fit for a log line: without its password (and without any credential the environment holds)."""
    return mask_text(uri)


def mask_data(data: Any, environ: Mapping[str, str] | None = None) -> Any:
    """A copy of nested dicts/lists with every string masked."""
    if isinstance(data, str):
        return mask_text(data, environ)
    if isinstance(data, Mapping):
        return {key: mask_data(value, environ) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return [mask_data(value, environ) for value in data]
    return data


_log_masking_installed = False


def install_log_masking() -> None:
    """Mask every log record of this process as it is made (message, arguments and traceback text).

    A record factory rather than a handler filter: Hydra replaces the handlers whenever it configures logging (once
    per job of a sweep), the factory stays. Records below a logger's level are never made, so the cost is only paid
    for lines that are written.
    """
    global _log_masking_installed
    if _log_masking_installed:
        return
    make_record = logging.getLogRecordFactory()

    def masked_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make_record(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string is reported by the handler, as without masking
            return record
        masked = mask_text(message)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info and not record.exc_text:
            record.exc_text = mask_text(logging.Formatter().formatException(record.exc_info))
        return record

    logging.setLogRecordFactory(masked_record)
    _log_masking_installed = True
