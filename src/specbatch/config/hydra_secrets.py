"""Keeping secrets out of the files Hydra itself writes (docs/troubleshooting.md, "Secrets").

Before a job runs, Hydra saves the composed config, its own config and the overrides as typed to
``<job dir>/.hydra/{config,hydra,overrides}.yaml`` (per job folder in a sweep), and a sweep's config to
``<sweep dir>/multirun.yaml``. A password in ``tracking.uri=http://user:pw@host`` or a token pasted from the
environment would stay there in plain text. Hydra offers no hook before those writes, so this callback rewrites them
through ``masking`` at the first moment it can: ``on_job_start`` runs right after ``run_job`` saved the job's files,
for a single run and for every job of a sweep, and the sweep's ``multirun.yaml`` (saved by the sweeper after
``on_multirun_start``) is masked by each job too. It also masks every log line of the process, Hydra's included.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from specbatch.common.atomic_files import atomic_write_text
from specbatch.common.masking import install_log_masking, mask_data, mask_text

log = logging.getLogger(__name__)

MULTIRUN_FILE = "multirun.yaml"


def mask_file(path: Path) -> bool:
    """Rewrite ``path`` (atomically) without its secrets; True when there was something to mask.

    YAML is masked value by value and written again, so a secret that was a whole value leaves valid YAML (a bare
    ``***`` would read as an alias); whatever is left (a secret in a key, a file that is not YAML) is masked as text.
    """
    text = path.read_text()
    if mask_text(text) == text:
        return False
    try:
        data = OmegaConf.to_container(OmegaConf.create(text), resolve=False)
        masked = mask_text(OmegaConf.to_yaml(OmegaConf.create(mask_data(data))))
    except Exception:  # noqa: BLE001 - not YAML omegaconf reads: masked as plain text, which is still secret-free
        masked = mask_text(text)
    atomic_write_text(path, masked)
    return True


class MaskSecretsCallback(Callback):
    """Masks Hydra's saved configs of each job (and of its sweep) and the process's log lines."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        install_log_masking()

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        # Before the launcher logs each job's overrides ("#0 : tracking.uri=...").
        install_log_masking()

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        # Again here: a Slurm array task unpickles the callbacks in a fresh process and only calls this one.
        install_log_masking()
        hydra = config.hydra
        files: list[Path] = []
        if hydra.output_subdir is not None:
            files += sorted(p for p in (Path(hydra.runtime.output_dir) / hydra.output_subdir).iterdir() if p.is_file())
        if hydra.mode == RunMode.MULTIRUN:
            # Every job masks it (the result is the same), so no job depends on another having run first.
            files.append(Path(hydra.sweep.dir) / MULTIRUN_FILE)
        for path in files:
            if path.is_file() and mask_file(path):
                log.debug("masked secrets in %s", path)
