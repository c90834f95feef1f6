"""Command lines as text: an argv as one shell line that can be pasted (every backend's serve command prints so)."""

from __future__ import annotations

import shlex


def format_command(argv: list[str]) -> str:
    """An argv as one shell line, quoted so it can be pasted."""
    return shlex.join(argv)
