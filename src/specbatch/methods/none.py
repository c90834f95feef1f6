"""The baseline: no speculation. Every speedup is measured against it, and every backend runs it."""

from __future__ import annotations

from specbatch.methods.method import Method

METHOD = Method(name="none", rank=0)
