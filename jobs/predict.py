"""Predict n-gram and suffix decoding's acceptance on a finished run, without a model (specbatch.prediction).

python jobs/predict.py RUN_FOLDER [RUN_FOLDER ...] [--methods ngram,suffix] [--ngram-k 1,2,3,5,8]
    [--ngram-window 2-4 ...] [--suffix-k 5] [--no-mlflow]

Replays each completion of the run (any method but spec=simulate, greedy) through vLLM's n-gram matcher and
arctic-inference's suffix cache, step by step as the engine drafts and verifies, and prints per set-up the drafts,
draft tokens, accepted tokens, AL, acceptance rate and per-position acceptance. Writes
RUN_FOLDER/prediction/predicted.{json,parquet} (the JSON holds each set-up's acceptance profile, overall and per
category, with the synthetic_acceptance_rates vLLM's synthetic rejection sampler takes) and logs the table to the
run's MLflow run.
"""

import argparse
import logging
import sys
from pathlib import Path

from specbatch.config import ConfigError
from specbatch.prediction.predict_run import format_prediction, log_prediction, predict, write_prediction
from specbatch.prediction.setups import (
    DEFAULT_NGRAM_KS,
    DEFAULT_SUFFIX_KS,
    METHODS,
    default_setups,
    parse_ks,
    parse_methods,
    parse_window,
)
from specbatch.prediction.turns import NoTokenIds
from specbatch.run.folder import read_run
from specbatch.run.status_merge import RunIncompleteError
from specbatch.tracking.store import TrackingUnreachable

log = logging.getLogger("specbatch.prediction")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="finished run folders (merged or not)")
    parser.add_argument("--methods", type=parse_methods, default=METHODS, help="ngram, suffix or both (the default)")
    parser.add_argument("--ngram-k", type=parse_ks("--ngram-k"), default=DEFAULT_NGRAM_KS, help="default 1..8")
    window_help = "n-gram lookup window MIN-MAX, repeatable (default: the run's own when it ran n-gram, else 2-4)"
    parser.add_argument("--ngram-window", type=parse_window, action="append", default=[], help=window_help)
    parser.add_argument("--suffix-k", type=parse_ks("--suffix-k"), default=DEFAULT_SUFFIX_KS, help="default 5")
    parser.add_argument("--no-mlflow", action="store_true", help="do not log the prediction to MLflow")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    status = 0
    for root in args.runs:
        try:
            config = read_run(root)["config"]
            ngram_ks = args.ngram_k if "ngram" in args.methods else ()
            suffix_ks = args.suffix_k if "suffix" in args.methods else ()
            prediction = predict(root, default_setups(config, ngram_ks, tuple(args.ngram_window), suffix_ks))
        # ConfigError: a damaged record (RecordError), or a run there is nothing to predict from (spec=simulate).
        except (NoTokenIds, FileNotFoundError, ConfigError, RunIncompleteError) as exc:
            log.error("%s", exc)
            status = 2
            continue
        print(format_prediction(prediction))
        out = write_prediction(prediction)
        log.info("written: %s", out)
        if not args.no_mlflow:
            try:
                if log_prediction(prediction):
                    log.info("logged to the run's MLflow run as %s/predicted.json", out.name)
            except TrackingUnreachable as exc:
                log.warning("the prediction is in %s but not in MLflow: %s", out, exc)
    return status


if __name__ == "__main__":
    sys.exit(main())
