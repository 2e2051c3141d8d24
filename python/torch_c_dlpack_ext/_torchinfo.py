"""A small frozen description of the running torch: built once, passed around, easy to fake.

It also judges the two attributes other code may have put on ``torch.Tensor`` before
us: a capsule is trusted only if ``PyCapsule_IsValid`` accepts it under the name
``dlpack_exchange_api``, and a legacy int only if it is an int64 address inside a
loaded shared object whose table passes the loader's checks. Anything else is
*bogus*: reported, and never deferred to or dereferenced.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any

from ._naming import CAPSULE_ATTR, LEGACY_INT_ATTR, Backend, torch_minor
from ._record import FrozenRecord

__all__ = [
    "CAPSULE_ATTR",
    "LEGACY_INT_ATTR",
    "TorchInfo",
    "check_legacy_pointer",
    "detect_backend",
    "mapped_image_base",
]


def detect_backend(torch: Any) -> Backend:
    """The backend of a torch module, by the project's reviewed rule.

    A GPU torch with no usable device reports ``cpu``: the CPU library serves it.
    ``getattr`` keeps builds whose ``torch.version`` lacks ``cuda`` or ``hip`` safe.
    """
    if torch.cuda.is_available():
        if getattr(torch.version, "cuda", None) is not None:
            return Backend.CUDA
        if getattr(torch.version, "hip", None) is not None:
            return Backend.ROCM
        return Backend.CUDA
    return Backend.CPU


class _DlInfo(ctypes.Structure):
    _fields_ = [
        ("dli_fname", ctypes.c_char_p),
        ("dli_fbase", ctypes.c_void_p),
        ("dli_sname", ctypes.c_char_p),
        ("dli_saddr", ctypes.c_void_p),
    ]


_DLADDR: list[Any] = []


def mapped_image_base(address: int) -> int | None:
    """Base address of the loaded shared object (or executable) one of whose segments
    holds ``address``; ``None`` if none does. Never reads ``address`` itself.

    ``dladdr`` on Linux and macOS (glibc checks the address against each loaded
    segment); ``GetModuleHandleExW(FROM_ADDRESS)`` on Windows.
    """
    if not 0 < address < 1 << 63:
        return None
    if sys.platform == "win32":
        module = ctypes.c_void_p()
        get_module = ctypes.WinDLL("kernel32").GetModuleHandleExW  # type: ignore[attr-defined,unused-ignore]
        get_module.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
        get_module.restype = ctypes.c_int
        # GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS | _UNCHANGED_REFCOUNT
        found = get_module(0x4 | 0x2, ctypes.c_void_p(address), ctypes.byref(module))
        return int(module.value) if found and module.value else None
    if not _DLADDR:
        prototype = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(_DlInfo))
        try:
            _DLADDR.append(prototype(("dladdr", ctypes.CDLL(None))))
        except AttributeError:  # glibc < 2.34 keeps it in libdl
            _DLADDR.append(prototype(("dladdr", ctypes.CDLL("libdl.so.2"))))
    info = _DlInfo()
    if _DLADDR[0](ctypes.c_void_p(address), ctypes.byref(info)) and info.dli_fbase:
        return int(info.dli_fbase)
    return None


def check_legacy_pointer(value: Any) -> tuple[int, tuple[int, int]]:
    """Validate a legacy ``__c_dlpack_exchange_api__`` value before anything reads it;
    return ``(address, DLPack version)``.

    It must be an int (not a bool) in ``1 .. 2**63-1``, aligned, and the whole
    ``DLPackExchangeAPI`` it names must lie inside one loaded shared object; only then
    is the table read (:func:`._loader.check_table`: version, non-NULL members), and
    every member must point into a loaded object too. Raises
    :class:`~torch_c_dlpack_ext.errors.LibraryLoadError` saying which check failed.
    """
    from ._dlpack_ctypes import EXCHANGE_API_MEMBERS, DLPackExchangeAPI
    from ._loader import check_table
    from .errors import LibraryLoadError, brief

    where = f"torch.Tensor.{LEGACY_INT_ATTR}"
    if isinstance(value, bool) or not isinstance(value, int):
        raise LibraryLoadError(f"{where} is {type(value).__name__} {brief(value)}, not an address")
    address = int(value)
    size = ctypes.sizeof(DLPackExchangeAPI)
    if not 0 < address < (1 << 63) - size or address % ctypes.alignment(DLPackExchangeAPI):
        raise LibraryLoadError(f"{where} = {brief(address)} is not a valid table address")
    base = mapped_image_base(address)
    if base is None or mapped_image_base(address + size - 1) != base:
        raise LibraryLoadError(
            f"{where} = {address:#x} does not point into a loaded shared library"
        )
    version = check_table(address, where)
    table = DLPackExchangeAPI.from_address(address)
    for name in EXCHANGE_API_MEMBERS:
        target = ctypes.cast(getattr(table, name), ctypes.c_void_p).value or 0
        if mapped_image_base(target) is None:
            raise LibraryLoadError(
                f"{where}: member {name} ({target:#x}) does not point into a loaded library"
            )
    return address, version


def _judge_attributes(tensor: Any) -> tuple[bool, bool, tuple[str, ...]]:
    """``(valid capsule, valid legacy int, problems)`` of ``tensor``'s two attributes."""
    from . import _is_exchange_capsule
    from ._dlpack_ctypes import CAPSULE_NAME
    from .errors import TorchCDLPackExtError, brief

    problems: list[str] = []
    missing = object()
    try:
        capsule = getattr(tensor, CAPSULE_ATTR, missing)
    except Exception as exc:
        capsule, problems = missing, [f"reading torch.Tensor.{CAPSULE_ATTR} raised {exc!r:.100}"]
    if capsule is not missing:
        if _is_exchange_capsule(capsule):
            return True, False, ()
        kind = (
            "a PyCapsule of another name (or holding NULL)"
            if type(capsule).__name__ == "PyCapsule"
            else f"{type(capsule).__name__} {brief(capsule)}"
        )
        problems.append(
            f"torch.Tensor.{CAPSULE_ATTR} is {kind}, not a {CAPSULE_NAME.decode()!r} capsule"
        )
    try:
        legacy = getattr(tensor, LEGACY_INT_ATTR, missing)
    except Exception as exc:
        legacy = missing
        problems.append(f"reading torch.Tensor.{LEGACY_INT_ATTR} raised {exc!r:.100}")
    if legacy is missing:
        return False, False, tuple(problems)
    try:
        check_legacy_pointer(legacy)
    except TorchCDLPackExtError as exc:
        problems.append(str(exc))
        return False, False, tuple(problems)
    return False, True, tuple(problems)


class TorchInfo(FrozenRecord):
    """What the selector needs to know about the running torch."""

    #: ``torch.__version__`` including its local part (``2.6.0+cu124``, ``2.8.0a0+abc``).
    version: str
    #: Backend by :func:`detect_backend`.
    backend: Backend
    #: ``torch.compiled_with_cxx11_abi()``; ``None`` where not applicable (Windows, macOS).
    cxx11_abi: bool | None
    #: ``torch.version.cuda`` / ``torch.version.hip`` (``None`` when absent).
    cuda_version: str | None
    hip_version: str | None
    #: ``torch.Tensor`` has a *valid* capsule attribute (torch >= 2.10, or set earlier).
    has_capsule: bool
    #: ``torch.Tensor`` has no valid capsule but a *valid* legacy int attribute.
    has_legacy_int: bool
    #: Why an attribute that is present was judged bogus (then it is ignored, not trusted).
    bogus_attributes: tuple[str, ...] = ()

    @property
    def major_minor(self) -> tuple[int, int]:
        return torch_minor(self.version)

    @classmethod
    def from_torch(cls, torch: Any) -> TorchInfo:
        """Describe an imported ``torch`` module.

        Raises what torch raises (``torch.cuda.is_available()`` failing, no
        ``__version__``): the caller reports that torch cannot be described.
        """
        abi: bool | None
        if sys.platform.startswith(("win", "darwin")):
            abi = None
        else:
            compiled = getattr(torch, "compiled_with_cxx11_abi", None)
            abi = bool(compiled()) if callable(compiled) else None
        version_mod = getattr(torch, "version", None)
        version = torch.__version__
        if not isinstance(version, str):
            raise TypeError(f"torch.__version__ is {type(version).__name__}, not a string")
        has_capsule, has_legacy_int, bogus = _judge_attributes(torch.Tensor)
        cuda, hip = getattr(version_mod, "cuda", None), getattr(version_mod, "hip", None)
        return cls(
            version=str(version),
            backend=detect_backend(torch),
            cxx11_abi=abi,
            cuda_version=cuda if isinstance(cuda, str) else None,
            hip_version=hip if isinstance(hip, str) else None,
            has_capsule=has_capsule,
            has_legacy_int=has_legacy_int,
            bogus_attributes=bogus,
        )
