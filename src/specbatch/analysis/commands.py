"""The command that measures compared set-ups again with more repeats (``-m ... repeat=0,1,2``).

From a sweep folder it is the sweep's own command line (Hydra's ``multirun.yaml``) with the repeats added: the runs
already finished exit at once, so only the missing repeats run. From loose run folders it is rebuilt from their
recorded configs: ``spec=<method>`` and every recorded value that differs from what that composes to, the values
that differ between the runs swept as lists.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from specbatch.analysis.recommend import REPEATS_OVERRIDE
from specbatch.common.masking import MASK
from specbatch.config import compose_job, to_plain_dict
from specbatch.config.overrides import without_keys

# Hydra writes the sweep's overrides here, in the sweep folder.
MULTIRUN_FILE = "multirun.yaml"
# A value Hydra reads as itself without quotes (anything else is written as a quoted string).
_PLAIN = re.compile(r"^[A-Za-z0-9_./\-+@:]+$")
# Never written into a command: the shard slice is the launcher's, and repeat is what the command adds.
_SKIPPED = ("repeat", "shard.index", "shard.count")


def _quote(override: str) -> str:
    return shlex.quote(override)


def sweep_repeat_command(sweep_dir: Path) -> str | None:
    """The sweep's own command with ``repeat=0..MIN_REPEATS-1``; None when the sweep left no multirun.yaml."""
    path = Path(sweep_dir) / MULTIRUN_FILE
    if not path.is_file():
        return None
    task = [str(o) for o in OmegaConf.load(path).hydra.overrides.task]
    kept = without_keys(task, "repeat")
    return "python jobs/generate.py -m " + " ".join(_quote(o) for o in [*kept, REPEATS_OVERRIDE])


def _leaves(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(_leaves(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


def _value(value: Any) -> str:
    """A recorded value in Hydra's override syntax."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return value if _PLAIN.match(value) and value not in ("null", "true", "false") else json.dumps(value)
    return json.dumps(value, separators=(",", ":"))


def _composed(method: str) -> dict[str, Any]:
    return _leaves(to_plain_dict(compose_job([f"spec={method}"])))


def config_repeat_command(configs: Iterable[dict[str, Any]]) -> str:
    """``python jobs/generate.py -m spec=... <recorded values that differ> repeat=0,1,2`` for these run configs.

    A key that differs from the composed default in any run is swept over every run's value of it (a sweep is a
    cross product, so it may add set-ups that were not measured; finished ones exit at once). A spec knob a method
    does not have (null in its run) is not a value to sweep: the sweep drops it for that method. Masked values (a
    password in a URI) are left out: the command then uses today's default for them."""
    records = [(config["spec"]["method"], _leaves(config)) for config in configs]
    defaults = {method: _composed(method) for method in dict.fromkeys(m for m, _ in records)}
    differing = {
        key
        for method, leaves in records
        for key, value in leaves.items()
        if key not in _SKIPPED and key != "spec.method" and defaults[method].get(key, object()) != value
    }
    swept: dict[str, list[str]] = {"spec": list(defaults)}
    for key in sorted(differing):
        for _, leaves in records:
            value = leaves.get(key)
            if (key.startswith("spec.") and value is None) or (isinstance(value, str) and MASK in value):
                continue
            if _value(value) not in swept.setdefault(key, []):
                swept[key].append(_value(value))
    overrides = [f"{key}={','.join(values)}" for key, values in swept.items() if values]
    return "python jobs/generate.py -m " + " ".join(_quote(o) for o in [*overrides, REPEATS_OVERRIDE])
