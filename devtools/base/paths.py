"""The checkout's root (:data:`ROOT`, the directory holding ``pyproject.toml``).

Imports nothing at all, so ``python -m devtools`` (:mod:`devtools.__main__`) can find the
checkout's ``python/`` through it before the core is importable.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["ROOT"]

#: The repository root (the directory holding ``pyproject.toml``).
ROOT = Path(__file__).resolve().parents[2]
