"""Use the package's helper modules from the checkout without importing the package.

``torch_c_dlpack_ext/__init__.py`` selects and loads a library at import (it imports
torch, and warns when there is none to load). The developer scripts that only need
its helpers (manifest, naming, errors, the subprocess helper, the version) must not
run that: in a checkout it has nothing to load and its warning is misleading noise
in every CI step. :func:`helpers_without_the_package` registers a bare package
object whose ``__path__`` is the source directory, so ``torch_c_dlpack_ext._manifest``
and friends import, and the package's ``__init__`` never runs.

Only for processes that never use the package itself (the scripts call it when run
as ``__main__``); a process that already imported the package is left alone.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

__all__ = ["helpers_without_the_package"]

_PACKAGE = "torch_c_dlpack_ext"


def helpers_without_the_package(root: Path | None = None) -> None:
    """Make ``torch_c_dlpack_ext.<helper>`` importable without the package's ``__init__``."""
    if _PACKAGE in sys.modules:
        return
    root = Path(__file__).resolve().parents[1] if root is None else root
    stub = types.ModuleType(_PACKAGE)
    stub.__path__ = [str(root / "python" / _PACKAGE)]
    sys.modules[_PACKAGE] = stub
