"""The ``dlpack_exchange_api`` PyCapsule, read without trusting it: is it one, what
pointer it holds, and which loaded image that pointer lies in.

Only for attributes someone put on ``torch.Tensor`` (the selector judges them before
trusting one, :mod:`._torchinfo`): the common import, where torch has no attribute or its
own capsule, does not load this module. Imports only :mod:`ctypes` and the shared names.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any

from _torch_c_dlpack_ext_core.naming import CAPSULE_NAME

__all__ = ["CAPSULE_NAME", "capsule_pointer", "image_of", "is_exchange_capsule"]

_IS_VALID = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi)
)
_GET_POINTER = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)


def is_exchange_capsule(value: object) -> bool:
    """Whether ``value`` is a PyCapsule named ``dlpack_exchange_api`` holding a pointer:
    ``PyCapsule_IsValid``, which checks the exact type first, so any object is safe."""
    return bool(_IS_VALID(value, CAPSULE_NAME))


def capsule_pointer(capsule: object) -> int:
    """The pointer of a capsule :func:`is_exchange_capsule` accepted."""
    return int(_GET_POINTER(capsule, CAPSULE_NAME) or 0)


class _DlInfo(ctypes.Structure):
    _fields_ = (
        ("dli_fname", ctypes.c_char_p),
        ("dli_fbase", ctypes.c_void_p),
        ("dli_sname", ctypes.c_char_p),
        ("dli_saddr", ctypes.c_void_p),
    )


_DLADDR: list[Any] = []


def image_of(address: int) -> tuple[int, bytes] | None:
    """``(base address, file name)`` of the loaded shared object (or executable) one of
    whose segments holds ``address``; ``None`` if none does. Never reads ``address``.

    ``dladdr`` (POSIX; glibc checks the address against each loaded segment), through
    ``ctypes.pythonapi``, the process's handle ctypes already opened (no dlopen).
    """
    if sys.platform == "win32" or not 0 < address < 1 << 63:
        return None
    if not _DLADDR:
        prototype = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(_DlInfo))
        try:
            _DLADDR.append(prototype(("dladdr", ctypes.pythonapi)))
        except AttributeError:  # glibc < 2.34 keeps it in libdl
            _DLADDR.append(prototype(("dladdr", ctypes.CDLL("libdl.so.2"))))
    info = _DlInfo()
    if _DLADDR[0](ctypes.c_void_p(address), ctypes.byref(info)) and info.dli_fbase:
        return int(info.dli_fbase), info.dli_fname or b""
    return None
