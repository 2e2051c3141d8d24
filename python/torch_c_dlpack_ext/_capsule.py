"""The exchange ABI's names, the ``dlpack_exchange_api`` PyCapsule, the table check and
the few facts the import reads of the running torch (its backend by build flavour, its
C++ ABI, its ``major.minor``), from one place.

On the import's load path (with :mod:`._loader`), so it imports only :mod:`ctypes` and
:mod:`sys` and creates no class at import: each ``ctypes.pythonapi`` prototype, and the
``dladdr`` structure, is made the first time it is needed. The names restate the core's
(``_torch_c_dlpack_ext_core.naming`` and the mirrors in ``dlpack_ctypes``), whose
import would cost the common path an enum and ~15 ctypes types; a unit test pins each
one to its source.

Private prototypes instead of ``ctypes.pythonapi.PyCapsule_*`` with argtypes set, which
other packages in the same process may configure differently. A capsule someone else
put on ``torch.Tensor`` is read without trusting it: is it one, what pointer it holds,
and which loaded image that pointer lies in (:mod:`._torchinfo` judges it).
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any

__all__ = [
    "CAPSULE_ATTR",
    "CAPSULE_NAME",
    "ENV_PREFIX",
    "EXPORT_BUILD_INFO",
    "EXPORT_TABLE",
    "LEGACY_INT_ATTR",
    "OWN_TABLES",
    "SUPPORTED_MAJOR",
    "TABLE_HEADER_BYTES",
    "TABLE_MEMBERS",
    "backend_of",
    "capsule_pointer",
    "check_table",
    "cxx11_abi_of",
    "image_of",
    "is_exchange_capsule",
    "make_capsule",
    "torch_minor_of",
]

#: The attribute torch 2.10+ sets on ``torch.Tensor`` (a PyCapsule), and the one we publish.
CAPSULE_ATTR = "__dlpack_c_exchange_api__"
#: The legacy int attribute (torch main for a few weeks; read by tvm-ffi 0.1.0-0.1.3).
LEGACY_INT_ATTR = "__c_dlpack_exchange_api__"
#: The PyCapsule name of an exchange table (the DLPack spec's).
CAPSULE_NAME = b"dlpack_exchange_api"
#: The one prefix of the runtime's environment variables.
ENV_PREFIX = "TORCH_C_DLPACK_EXT_"
#: The export of a library that returns its table (see CONTRIBUTING.md, "Build contract").
EXPORT_TABLE = "TorchDLPackExchangeAPIPtr"
#: The library's export describing its build (see CONTRIBUTING.md, "Build contract").
EXPORT_BUILD_INFO = "TorchCDLPackExtBuildInfo"
#: The DLPack major version whose ``DLPackExchangeAPI`` layout this package reads.
SUPPORTED_MAJOR = 1
#: The two numbers of the ``DLPackExchangeAPI`` layout :func:`check_table` reads: the
#: header (``DLPackVersion`` of two uint32, then the ``prev_api`` pointer) and the count of
#: function pointers after it.
TABLE_HEADER_BYTES = 8 + ctypes.sizeof(ctypes.c_void_p)
TABLE_MEMBERS = 5
#: Tables of the libraries this process loaded and checked (``_loader.open_library`` adds
#: each): a table found on ``torch.Tensor`` later is known to be ours.
OWN_TABLES: set[int] = set()

#: ``name -> (restype, *argtypes)`` of the ``ctypes.pythonapi`` functions used here.
_PROTOTYPES: dict[str, tuple[Any, ...]] = {
    "PyCapsule_IsValid": (ctypes.c_int, ctypes.py_object, ctypes.c_char_p),
    "PyCapsule_GetPointer": (ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p),
    "PyCapsule_New": (ctypes.py_object, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p),
}
_FUNCTIONS: dict[str, Any] = {}
# The capsule stores the name pointer, not a copy: this buffer must outlive every capsule.
_NAME_BUFFER = ctypes.create_string_buffer(CAPSULE_NAME)


def _pythonapi(name: str) -> Any:
    """The private prototype of ``ctypes.pythonapi``'s function ``name``, made once."""
    function = _FUNCTIONS.get(name)
    if function is None:
        restype, *argtypes = _PROTOTYPES[name]
        function = ctypes.PYFUNCTYPE(restype, *argtypes)((name, ctypes.pythonapi))
        function = _FUNCTIONS.setdefault(name, function)
    return function


def is_exchange_capsule(value: object) -> bool:
    """Whether ``value`` is a PyCapsule named ``dlpack_exchange_api`` holding a pointer:
    ``PyCapsule_IsValid``, which checks the exact type first, so any object is safe."""
    return bool(_pythonapi("PyCapsule_IsValid")(value, CAPSULE_NAME))


def capsule_pointer(capsule: object) -> int:
    """The pointer of a capsule :func:`is_exchange_capsule` accepted."""
    return int(_pythonapi("PyCapsule_GetPointer")(capsule, CAPSULE_NAME) or 0)


def make_capsule(pointer: int) -> Any:
    """A PyCapsule named ``dlpack_exchange_api`` wrapping ``pointer`` (no destructor:
    the table is static in a library that is never unloaded)."""
    return _pythonapi("PyCapsule_New")(pointer, ctypes.addressof(_NAME_BUFFER), None)


def check_table(pointer: int, origin: str) -> tuple[int, int]:
    """Check the ``DLPackExchangeAPI`` at ``pointer``; return its DLPack version.

    Raises :class:`~_torch_c_dlpack_ext_core.errors.LibraryLoadError` if the pointer is
    NULL, the major version is not 1, or any member is NULL (named through the mirrors).
    """
    if not pointer:
        from _torch_c_dlpack_ext_core.errors import LibraryLoadError

        raise LibraryLoadError(f"{origin}: {EXPORT_TABLE}() returned NULL")
    major, minor = (ctypes.c_uint32 * 2).from_address(pointer)
    version = (int(major), int(minor))
    if version[0] != SUPPORTED_MAJOR:
        from _torch_c_dlpack_ext_core.errors import LibraryLoadError

        raise LibraryLoadError(
            f"{origin}: exchange table has DLPack version {version[0]}.{version[1]}, "
            f"this loader reads major version {SUPPORTED_MAJOR}",
            "upgrade torch-c-dlpack-ext or rebuild the library",
        )
    members = (ctypes.c_void_p * TABLE_MEMBERS).from_address(pointer + TABLE_HEADER_BYTES)
    if not all(members):
        from _torch_c_dlpack_ext_core.dlpack_ctypes import EXCHANGE_API_MEMBERS, DLPackExchangeAPI
        from _torch_c_dlpack_ext_core.errors import LibraryLoadError

        table = DLPackExchangeAPI.from_address(pointer)
        missing = [name for name in EXCHANGE_API_MEMBERS if not getattr(table, name)]
        raise LibraryLoadError(
            f"{origin}: exchange table has NULL member(s) {', '.join(missing)}",
            "the library is incomplete: rebuild it",
        )
    return version


# --------------------------------------------------------------------------------------
# The running torch as the import reads it (the full path's TorchInfo too).
# --------------------------------------------------------------------------------------


def backend_of(torch: Any) -> str:
    """The backend of a torch module, by its build flavour: ``torch.version.hip`` set ->
    ``"rocm"``, else ``torch.version.cuda`` set -> ``"cuda"``, else ``"cpu"``.

    No device is asked: ``torch.cuda.is_available()`` runs ``cudaGetDeviceCount``, which
    initialises the driver (``cuInit``), poisons later ``fork()``s and freezes
    ``CUDA_VISIBLE_DEVICES`` in every process that imports tvm-ffi (docs/facts.md, "The
    backend is the build flavour"). A GPU torch on a host without a device gets its
    backend's library, which serves CPU tensors too. ``getattr`` keeps builds whose
    ``torch.version`` lacks ``cuda`` or ``hip`` safe.
    """
    version = getattr(torch, "version", None)
    if getattr(version, "hip", None) is not None:
        return "rocm"
    if getattr(version, "cuda", None) is not None:
        return "cuda"
    return "cpu"


def cxx11_abi_of(torch: Any) -> bool | None:
    """``torch.compiled_with_cxx11_abi()``; ``None`` where not applicable (Windows, macOS,
    a torch without it). Raises what torch raises."""
    if sys.platform.startswith(("win", "darwin")):
        return None
    compiled = getattr(torch, "compiled_with_cxx11_abi", None)
    return bool(compiled()) if callable(compiled) else None


def torch_minor_of(version: str) -> tuple[int, int] | None:
    """``(major, minor)`` of a torch version such as ``2.8.0a0+abc``, or ``None`` where
    ``naming.torch_minor`` raises (a unit test compares the two on any text)."""
    major, dot, rest = version.lstrip().partition(".")
    end = 0
    while end < len(rest) and rest[end].isdecimal():
        end += 1
    if not (dot and major.isdecimal() and 0 < end <= 9 and len(major) <= 9):
        return None
    return int(major), int(rest[:end])


_DLADDR: list[Any] = []


def _dladdr() -> Any:
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
