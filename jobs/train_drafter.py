"""Train an EAGLE-3 head on exported runs, in speculators' format: vLLM runs it as spec=eagle3 spec.model=OUT.

python jobs/train_drafter.py DATA [DATA ...] OUT [--epochs 3] [--learning-rate 1e-3] [--tokens-per-step 1024]
    [--draft-vocab-size 8192] [--max-steps N] [--prompt-loss] [--feature-noise 0]
    [--seed 0] [--no-mlflow]

DATA are folders jobs/export_drafter_data.py wrote (runs of one model); OUT is a new folder. Shows a progress bar
with the loss, and logs the training (settings, loss curve, the data's runs as a tag) to the MLflow store of the
first data run. Then: python jobs/generate.py model=<the target> spec=eagle3 spec.model=OUT.
"""

import argparse
import logging
import sys
from pathlib import Path

from specbatch.config import ConfigError
from specbatch.drafter.train import TrainSettings
from specbatch.drafter.train_job import train_drafter

log = logging.getLogger("specbatch.drafter")


def main() -> int:
    defaults = TrainSettings()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", type=Path, help="DATA [DATA ...] OUT")
    parser.add_argument("--epochs", type=int, default=defaults.epochs)
    parser.add_argument("--learning-rate", type=float, default=defaults.learning_rate)
    parser.add_argument("--tokens-per-step", type=int, default=defaults.tokens_per_step)
    parser.add_argument("--draft-vocab-size", type=int, default=defaults.draft_vocab_size)
    parser.add_argument("--max-steps", type=int, default=None, help="stop after this many steps (a smoke test)")
    parser.add_argument("--max-sequences", type=int, default=None, help="train on the data's first N sequences")
    parser.add_argument("--prompt-loss", action="store_true", help="learn at the prompts' positions too")
    parser.add_argument("--feature-noise", type=float, default=0.0, help="noise on the hidden states (share of RMS)")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--no-mlflow", action="store_true", help="do not log the training to MLflow")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if len(args.paths) < 2:
        parser.error("give the exported data and then the new folder of the head: DATA [DATA ...] OUT")
    *data, out = args.paths
    try:
        settings = TrainSettings(
            epochs=args.epochs,
            learning_rate=args.learning_rate,
            tokens_per_step=args.tokens_per_step,
            draft_vocab_size=args.draft_vocab_size,
            seed=args.seed,
            max_steps=args.max_steps,
            max_sequences=args.max_sequences,
            prompt_loss=args.prompt_loss,
            feature_noise=args.feature_noise,
        )
        train_drafter(data, out, settings, log_to_mlflow=not args.no_mlflow)
    except ConfigError as exc:
        log.error("%s", exc)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
