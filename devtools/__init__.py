"""Developer-only helpers shared by nox sessions, tests and benchmarks (never shipped).

They run from a checkout without installing the package, so the checkout's
``python/`` directory is made importable here, once, for every module below.
"""

from __future__ import annotations

import sys
from pathlib import Path

#: The repository root (the directory holding ``pyproject.toml``).
ROOT = Path(__file__).resolve().parents[1]

if str(ROOT / "python") not in sys.path:
    sys.path.insert(0, str(ROOT / "python"))
