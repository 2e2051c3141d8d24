"""The import boundary's wording (the warning naming an unexpected exception, the
``WarningAsImportError`` under warnings-as-errors), imported only when the boundary catches
something.

``torch_c_dlpack_ext.__init__`` runs the selector inside one ``try``; when anything gets
out of it, the boundary puts ``torch.Tensor`` back and calls these: one warning naming an
unexpected exception (the import then succeeds, publishing nothing), or the ImportError
that leaves the import when the user's warnings filter made a warning an error. Kept out
of ``__init__`` so the common import does not load (unmarshal) them.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._status import StatusFields

__all__ = ["contained_status", "warning_as_import_error"]


def contained_status(exc: BaseException) -> StatusFields | None:
    """Emit the one warning for an exception the selector let out; return its status's
    fields."""
    try:
        cause = f"{type(exc).__name__}: {exc}"
    except Exception:  # an exception whose str() fails too
        cause = f"{type(exc).__name__} (unprintable)"
    if len(cause) > 300:
        cause = cause[:300] + "..."
    remedy = _report_remedy()
    message = (
        f"torch-c-dlpack-ext: selecting a library failed ({cause}); nothing published, "
        f"torch.Tensor left unchanged. Please {remedy}"
    )
    category: type[Warning] = UserWarning
    try:
        from _torch_c_dlpack_ext_core.errors import TorchCDLPackExtWarning

        category = TorchCDLPackExtWarning
    except Exception:  # even errors.py is broken: still warn, as a UserWarning
        category = UserWarning
    try:
        warnings.warn(message, category, stacklevel=3)
    except Warning:  # the user's -W error: the boundary makes it an ImportError
        raise
    except Exception:  # cannot be displayed (closed stderr, a failing hook)
        pass  # the status below still records the text
    try:
        from ._model import DecisionKind as Kind

        return {
            "kind": Kind.UNAVAILABLE,
            "reason": f"selecting a library failed ({cause})",
            "remedy": remedy,
            "warnings": (message,),
        }
    except Exception:
        return None


def _report_remedy() -> str:
    """How to report it (``_wording.report_remedy``: never the diagnostics' own command
    in the diagnostics), or the diagnostics' command where the selector is broken too."""
    try:
        from ._wording import report_remedy

        return report_remedy()
    except Exception:  # the selector is what failed
        return "report it with the output of python -m torch_c_dlpack_ext"


def warning_as_import_error(warning: Warning) -> ImportError:
    """The ImportError that leaves the import when the user's warnings filter turned a
    warning raised during it (ours, or one from torch) into an exception."""
    try:
        said = str(warning)
    except Exception:  # a warning whose str() fails
        said = type(warning).__name__
    if not said.startswith("torch-c-dlpack-ext: "):
        said = f"torch-c-dlpack-ext: a {type(warning).__name__} during the import: {said}"
    kind = type(warning)
    category = kind.__qualname__
    if kind.__module__ != "builtins":  # -W and pytest take a dotted path to the class
        category = f"{kind.__module__}.{category}"
    message = (
        f"{said} [The warnings filter (python -W error, or pytest's filterwarnings = error) "
        "made this warning an error, so the import failed; consumers that import this "
        "package optionally (tvm-ffi) use their own path instead. To import it: remove "
        f"the cause above, let the warning through (-W default::{category}), "
        "or set TORCH_C_DLPACK_EXT_DISABLE=1 to load nothing, quietly.]"
    )
    try:
        from .errors import WarningAsImportError

        return WarningAsImportError(message, warning)
    except Exception:  # errors.py itself is broken: still an ImportError
        return ImportError(message, name="torch_c_dlpack_ext")
