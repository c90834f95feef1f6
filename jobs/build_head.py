"""Build the embedded model's trained EAGLE-3 head into the cache now, instead of on the first job that asks for it.

python jobs/build_head.py [smollm2-135m-eagle3-v3]

The recipe (specbatch.drafter.embedded_head): the target regenerates the packaged drafter-training prompts, its hidden
states are exported, the head trains; about 135 minutes on 2 cores. A stop keeps what is done: run it again to go on.
Then model_spec=smollm2_135m_eagle3 (spec=eagle3 on the embedded model) reads it, and spec=auto weighs it.
"""

import sys

from specbatch.drafter.embedded_head import main

if __name__ == "__main__":
    sys.exit(main())
