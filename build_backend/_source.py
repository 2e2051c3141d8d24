"""Where the project's files are, and the backend's error boundary.

The backend runs from a checkout or an unpacked sdist (``backend-path = [".", "python"]``).
It imports the shipped building blocks (``_torch_c_dlpack_ext_core``: names, manifest,
compiler driver), which have no import side effects; never the package
``torch_c_dlpack_ext``, whose import runs the runtime selector (and imports torch).

Errors reach the user as one paragraph: a frontend runs each hook in a child
Python (pip, build and uv all do), where an exception out of the hook is printed by
``sys.excepthook``. :func:`install_error_boundary` replaces that printout, for this
project's errors and for a missing build requirement, with the message alone (and
writes the full traceback to a file it names); hooks called in-process still raise
their typed errors.
"""

from __future__ import annotations

import os
import sys
import tempfile
import traceback
from pathlib import Path
from types import TracebackType

__all__ = [
    "BUILD_REQUIREMENTS",
    "CORE_DIR",
    "PACKAGE_DIR",
    "PYTHON_DIR",
    "ROOT",
    "brief_error",
    "install_error_boundary",
]

#: The project root: the checkout or the unpacked sdist.
ROOT = Path(__file__).resolve().parents[1]
#: What the wheel installs as the package: ``python/torch_c_dlpack_ext``.
PYTHON_DIR = ROOT / "python"
PACKAGE_DIR = PYTHON_DIR / "torch_c_dlpack_ext"
#: The shipped building blocks, installed beside the package.
CORE_DIR = PYTHON_DIR / "_torch_c_dlpack_ext_core"


#: ``[build-system] requires`` by the module each provides (a test keeps the two equal).
BUILD_REQUIREMENTS = {
    "packaging": "packaging>=24",
    "filelock": "filelock>=3.12",
    "tvm_ffi": "apache-tvm-ffi>=0.1.6",
    "pyproject_metadata": "pyproject-metadata>=0.9",
    "tomli": "tomli>=1.1; python_version < '3.11'",
}
#: Where the full traceback of the last failed build goes (one file, overwritten).
TRACEBACK_FILE = "torch-c-dlpack-ext-build-error.txt"


def _install_command() -> str:
    needed = [
        req.split(";")[0]
        for module, req in BUILD_REQUIREMENTS.items()
        if module != "tomli" or sys.version_info < (3, 11)
    ]
    return "pip install " + " ".join(f'"{req}"' for req in needed)


def brief_error(error: BaseException) -> str | None:
    """The one paragraph a user sees for ``error``, or ``None`` when it is not one of
    ours (nor a missing build requirement) and deserves its full traceback."""
    from _torch_c_dlpack_ext_core.errors import TorchCDLPackExtError

    if isinstance(error, TorchCDLPackExtError):
        return f"torch-c-dlpack-ext cannot be built: {error}"
    if isinstance(error, ModuleNotFoundError) and error.name:
        top = error.name.partition(".")[0]
        if top in BUILD_REQUIREMENTS:
            return (
                f"torch-c-dlpack-ext cannot be built: its build requirement "
                f"{BUILD_REQUIREMENTS[top].split(';')[0]} is not installed (no module named "
                f"{top!r}). A build without isolation (pip --no-build-isolation) uses the "
                f"environment as it is, so install the build requirements first: "
                f"{_install_command()}"
            )
    return None


def _save_traceback(
    kind: type[BaseException], value: BaseException, tb: TracebackType | None
) -> str:
    """Write the traceback to the temp dir (temp name, then rename); its path, or ''."""
    target = Path(tempfile.gettempdir()) / TRACEBACK_FILE
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{TRACEBACK_FILE}.", dir=target.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write("".join(traceback.format_exception(kind, value, tb)))
        os.replace(tmp, target)
    except OSError:
        return ""
    return str(target)


def _excepthook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
    message = brief_error(value)
    if message is None:
        sys.__excepthook__(kind, value, tb)
        return
    saved = _save_traceback(kind, value, tb)
    print(message + (f"\n(full traceback: {saved})" if saved else ""), file=sys.stderr)


def install_error_boundary() -> None:
    """Print this project's errors out of a hook as one paragraph (see the module doc)."""
    if sys.excepthook is sys.__excepthook__:
        sys.excepthook = _excepthook
