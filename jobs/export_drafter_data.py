"""Export a finished run as speculators training data for an EAGLE-3 head: its token ids and the hidden states.

python jobs/export_drafter_data.py RUN_FOLDER OUT [--aux-layers 2,15,27] [--capture transformers|vllm]

Each answered (row, turn, sample) becomes one sequence: the prompt's token ids as the engine got them and the tokens
it generated (loss mask 1 on those), with the target's hidden states at EAGLE-3's auxiliary layers and its last
layer, captured on the CPU with transformers (or on a GPU by vLLM's extract_hidden_states: --capture vllm). One
speculators data folder per shard of the run; rerun the same command after a stop and only the shards not yet
written are exported. Then: jobs/train_drafter.py OUT HEAD.
"""

import argparse
import logging
import sys
from pathlib import Path

from specbatch.config import ConfigError
from specbatch.drafter.export import CAPTURES, export_run
from specbatch.prediction.turns import NoTokenIds
from specbatch.run.status_merge import RunIncompleteError

log = logging.getLogger("specbatch.drafter")


def layers(text: str) -> list[int]:
    try:
        found = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give three layer ids, e.g. 2,15,27") from None
    if len(found) != 3:
        raise argparse.ArgumentTypeError(f"{text!r}: EAGLE-3 reads three layers, e.g. 2,15,27")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a finished run folder (merged or not)")
    parser.add_argument("out", type=Path, help="the export's folder: new, or an earlier export of the same run")
    parser.add_argument("--aux-layers", type=layers, default=None, help="default: vLLM's [2, L//2, L-3]")
    parser.add_argument("--capture", choices=CAPTURES, default="transformers", help="vllm: on a GPU (docs/drafter.md)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        export_run(args.run, args.out, args.aux_layers, args.capture)
    except (ConfigError, FileNotFoundError, NoTokenIds, RunIncompleteError) as exc:
        log.error("%s", exc)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
