"""Where the project's files are.

The backend runs from a checkout or an unpacked sdist (``backend-path = [".", "python"]``).
It imports the shipped building blocks (``_torch_c_dlpack_ext_core``: names, manifest,
compiler driver), which have no import side effects; never the package
``torch_c_dlpack_ext``, whose import runs the runtime selector (and imports torch),
and never ``devtools`` (dev-only, not in the sdist).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["CORE_DIR", "PACKAGE_DIR", "PYTHON_DIR", "ROOT"]

#: The project root: the checkout or the unpacked sdist.
ROOT = Path(__file__).resolve().parents[1]
#: What the wheel installs as the package: ``python/torch_c_dlpack_ext``.
PYTHON_DIR = ROOT / "python"
PACKAGE_DIR = PYTHON_DIR / "torch_c_dlpack_ext"
#: The shipped building blocks, installed beside the package.
CORE_DIR = PYTHON_DIR / "_torch_c_dlpack_ext_core"
