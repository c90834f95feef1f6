"""Builds whichever embedded model ``model.embedded`` names, into the folder ``model.path`` names.

The one place that knows every builder: :mod:`specbatch.assets.embedded` (SmolLM2) and :mod:`specbatch.assets.tiny`
(the tiny family, which borrows SmolLM2's tokenizer). Where each builds is :mod:`specbatch.assets.cache`'s.
"""

from __future__ import annotations

from pathlib import Path

from specbatch.assets.cache import unknown_kind
from specbatch.assets.embedded import ensure_smollm2
from specbatch.assets.tiny import ensure_tiny_family


def ensure_embedded(kind: str, path: str | Path) -> Path:
    """Build an embedded model (``model.embedded``) into ``path`` if it is not there yet."""
    if kind == "smollm2":
        return ensure_smollm2(path)
    if kind == "tiny":
        # model.path names one member of the family; the family is built as a whole in its parent folder.
        return ensure_tiny_family(Path(path).expanduser().parent) / Path(path).name
    raise unknown_kind(kind)
