"""Where the project's files are, and how the backend imports the package's build-time modules.

The backend runs from a checkout or an unpacked sdist (``backend-path = ["."]``).
It needs ``torch_c_dlpack_ext``'s build-time modules (names, manifest, compiler
driver) but must not run the package's ``__init__``: that runs the runtime
selector, which imports torch, and the sdist build promises never to import the
torch it compiles against.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path

__all__ = ["PACKAGE_DIR", "PYTHON_DIR", "ROOT", "import_build_modules"]

#: The project root: the checkout or the unpacked sdist.
ROOT = Path(__file__).resolve().parents[1]
#: What the wheel installs as the package: ``python/torch_c_dlpack_ext``.
PYTHON_DIR = ROOT / "python"
PACKAGE_DIR = PYTHON_DIR / "torch_c_dlpack_ext"


def import_build_modules() -> None:
    """Make ``torch_c_dlpack_ext.<submodule>`` importable from the source tree.

    When the package is not imported yet, a bare package object whose
    ``__path__`` is the source directory is registered, so importing a submodule
    does not execute ``__init__.py`` (and its torch import).
    """
    if str(PYTHON_DIR) not in sys.path:
        sys.path.insert(0, str(PYTHON_DIR))
    if "torch_c_dlpack_ext" in sys.modules:
        return
    spec = importlib.machinery.ModuleSpec("torch_c_dlpack_ext", None, is_package=True)
    spec.submodule_search_locations = [str(PACKAGE_DIR)]
    module = importlib.util.module_from_spec(spec)
    module.__path__ = [str(PACKAGE_DIR)]
    sys.modules["torch_c_dlpack_ext"] = module
