"""The llama_cpp backend (``engine.backend=llama_cpp``): the job starts llama.cpp's ``llama-server`` on the
target's GGUF and sends its requests as the server backend does. Light: only its options, declared here, among them
the GGUF files users type under the model and spec sections (``model.gguf``, ``spec.draft_gguf``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from specbatch.backends.server import ClientOptions
from specbatch.config.declarations import absent_when_null, identities

ENGINE = "specbatch.backends.llama_cpp.llama_cpp:LlamaCppEngine"


@dataclass
class Options(ClientOptions):
    """llama.cpp's knobs (its batch, the parallel slots, is engine.max_num_seqs)."""

    # Knobs typed under another section than engine: model.gguf, spec.draft_gguf.
    SECTIONS: ClassVar[dict[str, str]] = {"gguf": "model", "draft_gguf": "spec"}

    # The llama-server to start; null: the one `bash jobs/llama_cpp.sh install` built (make test builds it).
    llama_server: str | None = field(default=None, metadata=identities())
    # model.gguf: the target as one GGUF file; null: the embedded model's own GGUF (smollm2 ships as one). Left out
    # of the digests while null, so the runs that never set it keep their folders.
    gguf: str | None = field(default=None, metadata=absent_when_null())
    # spec.draft_gguf: for spec=draft_model, the draft as one GGUF file (llama-server's -md). Left out of the
    # digests while null.
    draft_gguf: str | None = field(default=None, metadata=absent_when_null())
