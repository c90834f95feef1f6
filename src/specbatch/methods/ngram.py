"""n-gram (prompt lookup): drafts the tokens that followed the latest occurrence of the context's suffix.

No checkpoint, no GPU; replay predicts it from a finished run (specbatch.prediction).
"""

from __future__ import annotations

from typing import Any

from specbatch.common.errors import require
from specbatch.methods.method import VERIFY_KNOBS, Method

# Its lookup window when a prediction is asked for a run that did not use n-gram: conf/spec/ngram.yaml's.
DEFAULT_WINDOW = (2, 4)
# The k a prediction replays by default.
DEFAULT_PREDICTED_KS = tuple(range(1, 9))


def check_window(spec: Any) -> None:
    """Both ends of the lookup window are set, from 1 up, in order."""
    lo, hi = spec.prompt_lookup_min, spec.prompt_lookup_max
    require(
        lo is not None and hi is not None,
        "spec=ngram needs spec.prompt_lookup_min and spec.prompt_lookup_max, e.g. 2 and 4",
    )
    require(lo >= 1, f"spec.prompt_lookup_min={lo} must be 1 or more, e.g. spec.prompt_lookup_min=2")
    require(
        hi >= lo,
        f"spec.prompt_lookup_max={hi} is below spec.prompt_lookup_min={lo}: "
        f"set spec.prompt_lookup_max to {lo} or more",
    )


METHOD = Method(
    name="ngram",
    rank=10,
    knobs=("prompt_lookup_min", "prompt_lookup_max", *VERIFY_KNOBS),
    knob_checks=(check_window,),
    replay="specbatch.prediction.setups:NgramSetup",
    # The k that batch-size sweeps found best somewhere (8 at batch 1 down to 1 at batch 64).
    auto_default_ks=(1, 2, 3, 5, 8),
)
