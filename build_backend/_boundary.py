"""The backend's ONE error boundary: every hook runs inside :func:`error_boundary`, which
turns an error of ours into one paragraph and the error's exit code, the traceback saved to
a file (``TORCH_C_DLPACK_EXT_BUILD_TRACEBACK=1`` lets it through with its traceback).

A frontend runs each hook in a child Python (pip, build and uv all do, through
pyproject_hooks or their own script) and shows what it printed. An error of this
project (:class:`~_torch_c_dlpack_ext_core.errors.TorchCDLPackExtError`), or a
missing build requirement, leaves the hook as ONE paragraph on stderr and
``SystemExit`` with the error's exit code (the typed error is its ``__cause__``,
for in-process callers); the full traceback goes to a file of its own (one per
failed build, in the temp dir), whose path the paragraph's last line names.
``TORCH_C_DLPACK_EXT_BUILD_TRACEBACK=1`` lets the error through untranslated, with
its traceback. Any other exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

from _torch_c_dlpack_ext_core.remedies import BUILD_REQUIREMENTS, build_requirements_command

__all__ = ["BUILD_REQUIREMENTS", "TRACEBACK_PREFIX", "TRACEBACK_VARIABLE", "brief_error",
           "error_boundary"]  # fmt: skip

#: Where the full traceback of a failed build goes: a file of its own per build in the
#: temp dir (``torch-c-dlpack-ext-build-error-<unique>.txt``), named in the paragraph.
TRACEBACK_PREFIX = "torch-c-dlpack-ext-build-error-"
#: Set to 1 (true, yes, on) to see a failed build's traceback instead of the paragraph.
TRACEBACK_VARIABLE = "TORCH_C_DLPACK_EXT_BUILD_TRACEBACK"


def brief_error(error: BaseException) -> str | None:
    """The one paragraph a user sees for ``error``, or ``None`` when it is not one of
    ours (nor a missing build requirement) and deserves its full traceback. A failed
    tool's last lines (:attr:`BuildError.details`) follow the first line."""
    from _torch_c_dlpack_ext_core.errors import TorchCDLPackExtError

    if isinstance(error, TorchCDLPackExtError):
        return f"torch-c-dlpack-ext cannot be built: {str(error).strip()}"
    if isinstance(error, ModuleNotFoundError) and error.name:
        top = error.name.partition(".")[0]
        if top in BUILD_REQUIREMENTS:
            return (
                f"torch-c-dlpack-ext cannot be built: its build requirement "
                f"{BUILD_REQUIREMENTS[top].split(';')[0]} is not installed (no module named "
                f"{top!r}). A build without isolation (pip --no-build-isolation) uses the "
                f"environment as it is, so install the build requirements first: "
                f"{build_requirements_command()}"
            )
    return None


def _save_traceback(error: BaseException) -> str:
    """Write the traceback to a new file in the temp dir; its path, or '' if that failed.

    Each build gets its own file (a unique name, created exclusively), so builds running
    at the same time or one after another never overwrite each other's. It is created with
    the mode the umask gives a new file (0644 under the usual 022), not mkstemp's 0600:
    whoever is asked to look at it can read it.
    """
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    directory = Path(tempfile.gettempdir())
    for _ in range(100):
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = directory / f"{TRACEBACK_PREFIX}{stamp}-{os.getpid()}-{secrets.token_hex(3)}.txt"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue
        except OSError:
            return ""
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
        except OSError:
            path.unlink(missing_ok=True)
            return ""
        return str(path)
    return ""


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
