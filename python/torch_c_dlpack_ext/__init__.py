"""torch-c-dlpack-ext: the DLPack C exchange API for every PyTorch. This module is the
import boundary, the fast defer path, :func:`status` and :func:`build_for_current_torch`.

Importing this package runs the selector once (the drop-in contract tvm-ffi relies
on: it imports the package, then reads the attributes):

- torch already provides ``torch.Tensor.__dlpack_c_exchange_api__``: nothing is
  loaded or changed;
- otherwise the bundled library built for the running torch version, backend and
  C++ ABI is verified, loaded and published as that capsule (plus the legacy int
  ``__c_dlpack_exchange_api__``);
- if nothing applies, import still succeeds: one :class:`TorchCDLPackExtWarning`
  says why and what to do, and :func:`status` keeps the details. Where the warnings
  filter makes that warning an error (``python -W error``), the import raises
  :class:`~torch_c_dlpack_ext.errors.WarningAsImportError`, an ``ImportError`` with the
  warning as its cause, which consumers' optional-import guards catch.

Import never compiles, spawns processes or touches the network unless
``TORCH_C_DLPACK_EXT_JIT=1`` asks it to build a library.

Rooms, each one job, bottom up (each imports only rooms above it in this list, and the
core): the common path's loader (``_loader``, imports nothing of the package) and the
cost figures (``_costs``, generated); the selector's records (``_model``); gathering the
facts (``_torchinfo``, ``_settings``; ``_library`` loads off the common path,
``_install`` reads the installation record); the wording of remedies and warnings
(``_wording``); the JIT (``_jit``); the policy (``_decide``, pure); the status record
(``_status``); acting on a decision (``_apply``); an explicit compile request
(``_compile``); the import boundary's wording
(``_boundary``); this module; the diagnostics (``__main__``). The import's common path
runs this module and ``_loader`` only.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path
    from types import ModuleType
    from typing import TypedDict

    from _torch_c_dlpack_ext_core.errors import TorchCDLPackExtWarning
    from _torch_c_dlpack_ext_core.version import __version__

    from . import errors
    from ._loader import CommonLoad
    from ._model import DecisionKind
    from ._status import Status, StatusFields

    class _State(TypedDict, total=False):
        # What the import kept (`fields`; None: deferred on the fast path) and the
        # Status that status() made of it on first use.
        fields: StatusFields | None
        status: Status


__all__ = [
    "DecisionKind",
    "Status",
    "TorchCDLPackExtWarning",
    "__version__",
    "build_for_current_torch",
    "errors",
    "status",
]

_PACKAGE_DIR = os.path.dirname(__file__)
# The shared names this module needs on every import, spelled out so the fast path imports
# none of our modules (a unit test pins them to naming's and the mirrors').
_ENV_PREFIX = "TORCH_C_DLPACK_EXT_"
_CAPSULE_ATTR = "__dlpack_c_exchange_api__"
_LEGACY_INT_ATTR = "__c_dlpack_exchange_api__"
_CAPSULE_NAME = b"dlpack_exchange_api"
# Names of __all__ resolved on first use (PEP 562), so the common import stays cheap.
_LAZY = {
    "__version__": ("_torch_c_dlpack_ext_core.version", "__version__"),
    "errors": ("torch_c_dlpack_ext.errors", None),
    "Status": ("torch_c_dlpack_ext._status", "Status"),
    "DecisionKind": ("torch_c_dlpack_ext._model", "DecisionKind"),
    "TorchCDLPackExtWarning": ("_torch_c_dlpack_ext_core.errors", "TorchCDLPackExtWarning"),
}


def _torch_defers(torch: ModuleType) -> bool:
    # The fast path: `torch` (the running one) provides its own valid API capsule, so the
    # selector would DEFER (the caller has checked that no override is set).
    #
    # Answered in this module alone: importing any submodule costs more than the whole
    # question (the first import from the package's directory was measured at ~0.3 ms, an
    # empty package's whole import at ~0.17 ms). Anything unusual (another torch, someone
    # else's capsule, an odd value) goes to the selector, whose `_torchinfo` checks and
    # reports it fully.
    try:
        # Only a torch that has the API itself (2.10+): on an older one the capsule was
        # set by someone else, and the selector validates its pointer before deferring.
        major, minor = torch.__version__.split(".")[:2]
        if (int(major), int(minor)) < (2, 10):
            return False
        # Whether the capsule on torch.Tensor is a valid `dlpack_exchange_api` capsule
        # holding exactly the table torch itself publishes (`torch._C._dlpack_exchange_api()`,
        # torch 2.10-2.15). `PyCapsule_GetPointer` checks the exact type and the name
        # first, so any object is safe: for anything but such a capsule it raises (a
        # `pythonapi` function turns the error it sets into an exception). A private
        # prototype (`_loader.pythonapi_function`, restated to keep this path to this
        # module): an instance of the class ctypes made for `pythonapi`, whose shared
        # functions other packages may configure. A torch without that function goes to
        # the selector.
        import ctypes  # torch has imported it

        api = ctypes.pythonapi
        pointer = api._FuncPtr(("PyCapsule_GetPointer", api))
        pointer.restype = ctypes.c_void_p
        pointer.argtypes = (ctypes.py_object, ctypes.c_char_p)
        return bool(
            pointer(getattr(torch.Tensor, _CAPSULE_ATTR), _CAPSULE_NAME)
            == pointer(torch._C._dlpack_exchange_api(), _CAPSULE_NAME)
        )
    except Exception:  # no attribute, an odd value: the selector says why
        return False


def _loader_module() -> ModuleType:
    # torch_c_dlpack_ext._loader, imported. The import system's first import from the
    # package's directory builds that directory's finder (zipimport's attempt, stats, a
    # listing): ~60 us, more than any check of the load (docs/facts.md, "What the
    # import's Python costs"). So the load path loads _loader from its file the way
    # importlib's documentation imports a source file directly (its cached bytecode is
    # used as usual), and leaves it to the import system where that does not apply:
    # imported already, or no plain file (a zip, a frozen application).
    name = __name__ + "._loader"
    module = sys.modules.get(name)
    if module is not None:
        return module
    import importlib.util  # torch has imported it: a dict lookup

    spec = importlib.util.spec_from_file_location(name, os.path.join(_PACKAGE_DIR, "_loader.py"))
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except OSError:  # no such file to read (the module's own code does no I/O)
            del sys.modules[name]
        else:
            globals()["_loader"] = module  # as the import system sets it on its package
            return module
    return importlib.import_module(name)


def _run_selector(torch: ModuleType | Exception) -> StatusFields | None:
    # `torch`: the running torch, or the exception its own import raised: say so; nothing
    # below imports it again.
    if isinstance(torch, Exception):
        from ._apply import torch_import_failed

        return torch_import_failed(torch)
    # No TORCH_C_DLPACK_EXT_* variable (one look at the environment for both fast paths):
    # a torch with its own API is deferred to, else the common path loads.
    # ("\0" is in no variable's name: each name is looked at from its start.)
    if ("\0" + "\0".join(os.environ)).find("\0" + _ENV_PREFIX) < 0:
        if _torch_defers(torch):
            return None
        loaded: CommonLoad | None = _loader_module().load_common(torch, _PACKAGE_DIR)
        if loaded is not None:
            return {"kind": loaded[0], "library": loaded[1], "common_path": True}
    # Anything unusual: the full selector decides, acts and says why.
    from pathlib import Path

    from ._apply import select_and_load

    return select_and_load(os.environ, Path(_PACKAGE_DIR))


_MISSING = object()
_ATTRIBUTES = (_CAPSULE_ATTR, _LEGACY_INT_ATTR)


def _restore(tensor: object, saved: dict[str, object]) -> None:
    # Put `torch.Tensor`'s own two attributes back as they were before the selector ran.
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


def _import_torch() -> ModuleType:
    # torch, imported at most once per import of ours (the later steps find it in
    # sys.modules). A failed `import torch` (under `python -W error`, a warning of its own
    # becomes an exception) leaves its submodules (torch._C...) behind without torch:
    # importing it again runs its __init__ over them, fails differently each time, and
    # the process may crash at exit. So a failure is raised once and never retried, and a
    # torch left half-imported (by an earlier failure, or still being imported: a
    # circular import) is not touched. Only dict lookups on the common path.
    module = sys.modules.get("torch")
    if module is None:
        if "torch._C" in sys.modules:
            from _torch_c_dlpack_ext_core.errors import TorchHalfImportedError

            raise TorchHalfImportedError(
                "an earlier import of torch in this process failed and left it "
                "half-initialised (torch._C is loaded, torch is not), so it is not imported "
                "again",
                "fix what torch's own import raises (python -c 'import torch' shows it), "
                "then start a new process",
            )
        import importlib  # loaded at interpreter start: a dict lookup

        # import_module, typed as returning a module (torch has no stubs to say so).
        return importlib.import_module("torch")
    if getattr(getattr(module, "__spec__", None), "_initializing", False):
        from _torch_c_dlpack_ext_core.errors import TorchHalfImportedError

        raise TorchHalfImportedError(
            "torch is still being imported: torch_c_dlpack_ext was imported from inside "
            "torch's own import, so torch is not touched",
            "import torch_c_dlpack_ext after torch's import has finished",
        )
    return module


def _import_boundary() -> StatusFields | None:
    # Run the selector; turn ANY exception it lets out into the documented outcome.
    #
    # The one place that guarantees `import torch_c_dlpack_ext` raises nothing but an
    # `ImportError` (the code below reports every expected failure itself; this catches
    # the unexpected, including `BaseException` subclasses such as `GeneratorExit`):
    # whatever was set on `torch.Tensor` is put back, one warning names the exception,
    # and status says UNAVAILABLE. `KeyboardInterrupt` and `SystemExit`
    # propagate, after the same restore: the user asked for those. A warning that the
    # user's filters turned into an exception (`-W error`) leaves as a
    # torch_c_dlpack_ext.errors.WarningAsImportError (an `ImportError`,
    # the warning chained as its cause), because consumers guard this import with
    # `except ImportError` only.
    tensor: object = None
    saved: dict[str, object] = {}
    torch: ModuleType | Exception
    try:
        try:
            module = _import_torch()  # the selector's first step; here to snapshot too
        except Exception as exc:  # torch's own import failed: the selector says why
            torch = exc
        else:
            torch = module
            try:
                tensor = module.Tensor
                own = vars(tensor)
                saved = {_CAPSULE_ATTR: own.get(_CAPSULE_ATTR, _MISSING)}
                saved[_LEGACY_INT_ATTR] = own.get(_LEGACY_INT_ATTR, _MISSING)
            except Exception:  # an odd torch: the selector reports why
                tensor = None
        return _run_selector(torch)
    except BaseException as exc:
        _restore(tensor, saved)
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        try:  # only now: the common import never loads the boundary's wording
            from . import _boundary
        except Exception:  # a broken installation: still what consumers' guards catch
            raise ImportError(
                f"torch-c-dlpack-ext: {type(exc).__name__} during the import, and its "
                "_boundary module cannot be imported: reinstall torch-c-dlpack-ext",
                name=__name__,
            ) from exc
        if isinstance(exc, Warning):
            raise _boundary.warning_as_import_error(exc) from exc
        try:
            return _boundary.contained_status(exc)
        except Warning as warning:  # the boundary's own warning, made an error
            raise _boundary.warning_as_import_error(warning) from warning


# The import keeps the fields of its Status; status() makes the record on first use.
# None means "deferred on the fast path": status() describes torch then.
_STATE: _State = {"fields": _import_boundary()}


def __getattr__(name: str) -> object:
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
        from ._apply import status_of

        made = status_of(_STATE["fields"])
        # setdefault is atomic: threads asking at once all get the first record made.
        _STATE.setdefault("status", made)
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
    from ._compile import build_for_current_torch as build

    _STATE["status"], library = build(os.environ)
    return library
