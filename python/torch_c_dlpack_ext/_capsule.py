"""Reading a ``dlpack_exchange_api`` capsule this package did not make: is it one, what
pointer it holds, and which loaded image that pointer lies in (:mod:`._torchinfo` judges
it). Off the import's common path: the names, the capsule we publish and the table check
are :mod:`._loader`'s.

A capsule someone else put on ``torch.Tensor`` is read without trusting it, through
private prototypes (``ctypes.pythonapi``'s shared functions may have been configured
differently by other packages).
"""

from __future__ import annotations

import ctypes
import sys
from typing import TYPE_CHECKING

from ._loader import CAPSULE_NAME, pythonapi_function

if TYPE_CHECKING:
    from _ctypes import CFuncPtr, _CDataType

__all__ = ["capsule_pointer", "image_of", "is_exchange_capsule"]

_FUNCTIONS: dict[str, CFuncPtr] = {}


def _capsule_function(name: str, restype: type[_CDataType]) -> CFuncPtr:
    """The private prototype of ``PyCapsule_<name>`` (object, name) -> ``restype``, made once."""
    function = _FUNCTIONS.get(name)
    if function is None:
        made = pythonapi_function(f"PyCapsule_{name}", restype, ctypes.py_object, ctypes.c_char_p)
        function = _FUNCTIONS.setdefault(name, made)
    return function


def is_exchange_capsule(value: object) -> bool:
    """Whether ``value`` is a PyCapsule named ``dlpack_exchange_api`` holding a pointer:
    ``PyCapsule_IsValid``, which checks the exact type first, so any object is safe."""
    return bool(_capsule_function("IsValid", ctypes.c_int)(value, CAPSULE_NAME))


def capsule_pointer(capsule: object) -> int:
    """The pointer of a capsule :func:`is_exchange_capsule` accepted."""
    return int(_capsule_function("GetPointer", ctypes.c_void_p)(capsule, CAPSULE_NAME) or 0)


_DLADDR: list[tuple[CFuncPtr, type[ctypes.Structure]]] = []


def _dladdr() -> tuple[CFuncPtr, type[ctypes.Structure]]:
    """``(dladdr, Dl_info type)``, made on first use (only for a table from outside)."""
    if not _DLADDR:

        class DlInfo(ctypes.Structure):
            _fields_ = (
                ("dli_fname", ctypes.c_char_p),
                ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p),
                ("dli_saddr", ctypes.c_void_p),
            )

        prototype = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(DlInfo))
        try:
            function = prototype(("dladdr", ctypes.pythonapi))
        except AttributeError:  # glibc < 2.34 keeps it in libdl
            function = prototype(("dladdr", ctypes.CDLL("libdl.so.2")))
        _DLADDR.append((function, DlInfo))
    return _DLADDR[0]


def image_of(address: int) -> tuple[int, bytes] | None:
    """``(base address, file name)`` of the loaded shared object (or executable) one of
    whose segments holds ``address``; ``None`` if none does. Never reads ``address``.

    ``dladdr`` (POSIX; glibc checks the address against each loaded segment), through
    ``ctypes.pythonapi``, the process's handle ctypes already opened (no dlopen).
    """
    if sys.platform == "win32" or not 0 < address < 1 << 63:
        return None
    function, info_type = _dladdr()
    info = info_type()
    if function(ctypes.c_void_p(address), ctypes.byref(info)) and info.dli_fbase:
        return int(info.dli_fbase), info.dli_fname or b""
    return None
