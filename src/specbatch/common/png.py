"""PNG figures with matplotlib on machines without a display: the comparison's plots and a run's own chart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specbatch.common.atomic_files import atomic_write


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend: batch nodes have no display, figures only go to files."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(fig: Any, plt: Any, path: Path) -> Path:
    """Lay out, write and close ``fig`` as ``path``.

    Written beside and renamed, so a reader never sees half a PNG; the temporary name has no .png ending, so the
    format is named.
    """
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=110, format="png"))
    plt.close(fig)
    return path
