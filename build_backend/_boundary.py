"""The backend's ONE error boundary: every hook runs inside :func:`error_boundary`.

A frontend runs each hook in a child Python (pip, build and uv all do, through
pyproject_hooks or their own script) and shows what it printed. An error of this
project (:class:`~_torch_c_dlpack_ext_core.errors.TorchCDLPackExtError`), or a
missing build requirement, leaves the hook as ONE paragraph on stderr and
``SystemExit`` with the error's exit code (the typed error is its ``__cause__``,
for in-process callers); the full traceback goes to a file the paragraph names.
``TORCH_C_DLPACK_EXT_BUILD_TRACEBACK=1`` lets the error through untranslated, with
its traceback. Any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import traceback
from collections.abc import Iterator
from pathlib import Path

__all__ = ["BUILD_REQUIREMENTS", "TRACEBACK_FILE", "TRACEBACK_VARIABLE", "brief_error",
           "error_boundary"]  # fmt: skip

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
#: Set to 1 (true, yes, on) to see a failed build's traceback instead of the paragraph.
TRACEBACK_VARIABLE = "TORCH_C_DLPACK_EXT_BUILD_TRACEBACK"


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


def _save_traceback(error: BaseException) -> str:
    """Write the traceback to the temp dir (temp name, then rename); its path, or ''."""
    target = Path(tempfile.gettempdir()) / TRACEBACK_FILE
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{TRACEBACK_FILE}.", dir=target.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(
                "".join(traceback.format_exception(type(error), error, error.__traceback__))
            )
        os.replace(tmp, target)
    except OSError:
        return ""
    return str(target)


def _traceback_asked() -> bool:
    return os.environ.get(TRACEBACK_VARIABLE, "").strip().lower() in ("1", "true", "yes", "on")


@contextlib.contextmanager
def error_boundary() -> Iterator[None]:
    """Translate what leaves the block as the module docstring says."""
    try:
        yield
    except Exception as error:
        message = brief_error(error)
        if message is None or _traceback_asked():
            raise
        saved = _save_traceback(error)
        print(message + (f"\n(full traceback: {saved})" if saved else ""), file=sys.stderr)
        sys.stderr.flush()
        raise SystemExit(getattr(error, "exit_code", 1)) from error
