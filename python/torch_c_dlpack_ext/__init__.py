"""torch-c-dlpack-ext: the DLPack C exchange API for every PyTorch.

Importing this package runs the selector once (the drop-in contract tvm-ffi relies
on: it imports the package, then reads the attributes):

- torch already provides ``torch.Tensor.__dlpack_c_exchange_api__``: nothing is
  loaded or changed;
- otherwise the bundled library built for the running torch version, backend and
  C++ ABI is verified, loaded and published as that capsule (plus the legacy int
  ``__c_dlpack_exchange_api__``);
- if nothing applies, import still succeeds: one :class:`TorchCDLPackExtWarning`
  says why and what to do, and :func:`status` keeps the details.

Import never compiles, spawns processes or touches the network unless
``TORCH_C_DLPACK_EXT_JIT=1`` asks it to build a library.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from _torch_c_dlpack_ext_core.naming import CAPSULE_ATTR, ENV_PREFIX, LEGACY_INT_ATTR, torch_minor

if TYPE_CHECKING:
    from _torch_c_dlpack_ext_core.errors import TorchCDLPackExtWarning
    from _torch_c_dlpack_ext_core.version import __version__

    from . import errors
    from ._loader import Status
    from ._select import DecisionKind

__all__ = [
    "DecisionKind",
    "Status",
    "TorchCDLPackExtWarning",
    "__version__",
    "build_for_current_torch",
    "errors",
    "status",
]

_PACKAGE_DIR = Path(__file__).parent
# Names of __all__ resolved on first use (PEP 562), so the common import stays cheap.
_LAZY = {
    "__version__": ("_torch_c_dlpack_ext_core.version", "__version__"),
    "errors": ("torch_c_dlpack_ext.errors", None),
    "Status": ("torch_c_dlpack_ext._loader", "Status"),
    "DecisionKind": ("torch_c_dlpack_ext._select", "DecisionKind"),
    "TorchCDLPackExtWarning": ("_torch_c_dlpack_ext_core.errors", "TorchCDLPackExtWarning"),
}


def _is_exchange_capsule(value: object) -> bool:
    """Whether ``value`` is a PyCapsule named ``dlpack_exchange_api`` holding a pointer:
    ``PyCapsule_IsValid``, which checks the exact type first, so any object is safe."""
    import ctypes  # torch has already imported it

    is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
        ("PyCapsule_IsValid", ctypes.pythonapi)
    )
    return bool(is_valid(value, b"dlpack_exchange_api"))


def _in_torch_python(capsule: object) -> bool:
    """Whether the table in a valid capsule lies in torch's own ``libtorch_python`` (where
    torch 2.10+ keeps it): one ``dladdr``, so the fast path stays cheap; anything else
    goes to the selector, which checks the pointer fully before deferring to it."""
    import ctypes
    import sys

    if sys.platform == "win32":
        return True  # no dladdr: the selector's image checks do not apply there either

    class DlInfo(ctypes.Structure):
        _fields_ = [
            ("dli_fname", ctypes.c_char_p),
            ("dli_fbase", ctypes.c_void_p),
            ("dli_sname", ctypes.c_char_p),
            ("dli_saddr", ctypes.c_void_p),
        ]

    get = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
        ("PyCapsule_GetPointer", ctypes.pythonapi)
    )
    dladdr = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(DlInfo))(
        ("dladdr", ctypes.pythonapi)
    )
    info = DlInfo()
    pointer = get(capsule, b"dlpack_exchange_api")
    if not pointer or not dladdr(ctypes.c_void_p(pointer), ctypes.byref(info)):
        return False
    return os.path.basename(info.dli_fname or b"").startswith(b"libtorch_python")


def _torch_defers() -> bool:
    """The fast path: torch provides a valid API capsule and no override is set, so the
    selector would DEFER; answering that without loading the selector keeps import ~free."""
    if any(name.startswith(ENV_PREFIX) for name in os.environ):
        return False
    try:
        import torch

        # Only a torch that has the API itself (2.10+): on an older one the capsule was
        # set by someone else, and the selector validates its pointer before deferring.
        if torch_minor(torch.__version__) < (2, 10):
            return False
        capsule = getattr(torch.Tensor, CAPSULE_ATTR)
        return _is_exchange_capsule(capsule) and _in_torch_python(capsule)
    except Exception:  # no torch, no attribute, an odd one: the full selector reports why
        return False


def _run_selector() -> Status | None:
    if _torch_defers():
        return None
    from ._loader import select_and_load

    return select_and_load(os.environ, _PACKAGE_DIR)


_MISSING = object()
_ATTRIBUTES = (CAPSULE_ATTR, LEGACY_INT_ATTR)


def _restore(tensor: Any, saved: dict[str, object]) -> None:
    """Put ``torch.Tensor``'s own two attributes back as they were before the selector ran."""
    if tensor is None:
        return
    try:
        for name in _ATTRIBUTES:
            before, now = saved.get(name, _MISSING), vars(tensor).get(name, _MISSING)
            if now is not before:
                if before is _MISSING:
                    delattr(tensor, name)
                else:
                    setattr(tensor, name, before)
    except Exception:  # a Tensor that refuses changes: we could not have set anything either
        return


def _contained_status(exc: BaseException) -> Status | None:
    """Emit the one warning for an exception the selector let out; return its status."""
    try:
        cause = f"{type(exc).__name__}: {exc}"
    except Exception:  # an exception whose str() fails too
        cause = f"{type(exc).__name__} (unprintable)"
    if len(cause) > 300:
        cause = cause[:300] + "..."
    message = (
        f"torch-c-dlpack-ext: selecting a library failed ({cause}); nothing published, "
        "torch.Tensor left unchanged. Please report it with the output of: "
        "python -m torch_c_dlpack_ext"
    )
    category: type[Warning] = UserWarning
    try:
        from _torch_c_dlpack_ext_core.errors import TorchCDLPackExtWarning

        category = TorchCDLPackExtWarning
    except Exception:  # even errors.py is broken: still warn, as a UserWarning
        category = UserWarning
    try:
        warnings.warn(message, category, stacklevel=3)
    except Warning:  # the user's -W error: propagate, as the boundary does
        raise
    except Exception:  # cannot be displayed (closed stderr, a failing hook)
        pass  # the status below still records the text
    try:
        from ._loader import Status as StatusType
        from ._select import DecisionKind as Kind

        return StatusType(
            kind=Kind.UNAVAILABLE,
            reason=f"selecting a library failed ({cause})",
            remedy="report it with the output of python -m torch_c_dlpack_ext",
            warnings=(message,),
        )
    except Exception:
        return None


def _import_boundary() -> Status | None:
    """Run the selector; turn ANY exception it lets out into the documented outcome.

    The one place that guarantees ``import torch_c_dlpack_ext`` does not raise (the
    code below reports every expected failure itself; this catches the unexpected,
    including ``BaseException`` subclasses such as ``GeneratorExit``): whatever was set
    on ``torch.Tensor`` is put back, one warning names the exception, and
    :func:`status` says UNAVAILABLE. Only ``KeyboardInterrupt``, ``SystemExit`` and a
    warning that the user's filters turned into an error (``-W error``) propagate,
    after the same restore: the user asked for those.
    """
    tensor: Any = None
    saved: dict[str, object] = {}
    try:
        try:
            import torch  # the selector's first step anyway; here to snapshot the attributes

            tensor = torch.Tensor
            saved = {name: vars(tensor).get(name, _MISSING) for name in _ATTRIBUTES}
        except Exception:  # no usable torch: the selector reports why
            tensor = None
        return _run_selector()
    except BaseException as exc:
        _restore(tensor, saved)
        if isinstance(exc, (KeyboardInterrupt, SystemExit, Warning)):
            raise
        return _contained_status(exc)


# "status" absent means "deferred on the fast path"; status() describes it on demand.
_STATE: dict[str, Status] = {}
_import_status = _import_boundary()
if _import_status is not None:
    _STATE["status"] = _import_status
del _import_status


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module_name, attr = _LAZY[name]
        module = importlib.import_module(module_name)
        value = module if attr is None else getattr(module, attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def status() -> Status:
    """What importing this package did: the decision, the library loaded (if any),
    the running torch, the reason, and the warnings emitted."""
    if "status" not in _STATE:
        from ._loader import deferred_status

        _STATE["status"] = deferred_status()
    return _STATE["status"]


def build_for_current_torch() -> Path:
    """Compile the library for the running torch (cached), load it and publish it.

    The build goes to ``TORCH_C_DLPACK_EXT_CACHE_DIR`` (default: the user cache
    directory) under a key of the full torch identity, so later calls and later
    processes reuse it. An explicit call publishes even where torch provides the
    API itself, replacing torch's capsule (as ``TORCH_C_DLPACK_EXT_FORCE=1`` does).
    Returns the library's path; raises a :class:`~torch_c_dlpack_ext.errors.BuildError`
    (or another :mod:`~torch_c_dlpack_ext.errors` class) saying what is missing.
    """
    from . import _jit

    _STATE["status"], library = _jit.build_for_current_torch(os.environ)
    return library
