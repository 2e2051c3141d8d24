"""Describing the running torch (:func:`describe_torch` makes its :class:`~._model.TorchInfo`):
built once, passed around. Its backend is the build flavour (``torch.version.hip``, ``.xpu``,
``.cuda``, else cpu), never a device query, which would initialise CUDA; it also judges an
exchange table someone else put on ``torch.Tensor`` and where it comes from.

It also judges the two attributes other code may have put on ``torch.Tensor`` before
us, reading a capsule it did not make without trusting it (through private prototypes:
``ctypes.pythonapi``'s shared functions may have been configured differently by other
packages): a capsule is trusted only if ``PyCapsule_IsValid`` accepts it under the name
``dlpack_exchange_api``, and a legacy int only if it is an int64 address inside a
loaded shared object whose table passes :func:`check_table`. Anything else is
*bogus*: reported, and never deferred to or dereferenced. The table check itself is
:func:`._loader.check_table` (the loader checks its own libraries' tables with it).
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import TYPE_CHECKING

from _torch_c_dlpack_ext_core.naming import (
    CAPSULE_ATTR,
    LEGACY_INT_ATTR,
    Backend,
    running_python,
)

from ._loader import (
    CAPSULE_NAME,
    EXPORT_BUILD_INFO,
    EXPORT_TABLE,
    OWN_TABLES,
    SUPPORTED_MAJOR,
    TABLE_HEADER_BYTES,
    TABLE_MEMBERS,
    backend_of,
    check_table,
    cxx11_abi_of,
    pythonapi_function,
)
from ._model import OWN_LIBRARY, TorchInfo

if TYPE_CHECKING:
    from _ctypes import CFuncPtr, _CDataType
    from types import ModuleType

__all__ = [
    "CAPSULE_ATTR",
    "EXPORT_TABLE",
    "LEGACY_INT_ATTR",
    "OWN_TABLES",
    "SUPPORTED_MAJOR",
    "TABLE_HEADER_BYTES",
    "TABLE_MEMBERS",
    "TorchInfo",
    "check_legacy_pointer",
    "check_table",
    "check_table_pointer",
    "describe_torch",
    "detect_backend",
    "mapped_image_base",
    "table_origin",
]


def detect_backend(torch: ModuleType) -> Backend:
    """The backend of a torch module, by its build flavour (:func:`._loader.backend_of`:
    ``torch.version.hip`` -> rocm, else ``torch.version.xpu`` -> xpu, else
    ``torch.version.cuda`` -> cuda, else cpu). No
    device is asked, so describing torch never initialises CUDA."""
    return Backend(backend_of(torch))


def mapped_image_base(address: int) -> int | None:
    """Base address of the loaded shared object (or executable) one of whose segments
    holds ``address``; ``None`` if none does. Never reads ``address`` itself.

    ``dladdr`` on Linux and macOS (:func:`image_of`);
    ``GetModuleHandleExW(FROM_ADDRESS)`` on Windows.
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
    image = image_of(address)
    if image is None:
        return None
    _IMAGE_NAMES[image[0]] = image[1]
    return image[0]


#: File name of each image base :func:`mapped_image_base` found (POSIX only).
_IMAGE_NAMES: dict[int, bytes] = {}


def _table_provenance(address: int, base: int) -> str | None:
    """Why the table at ``address`` (in the image at ``base``) is one a consumer may
    call through, or ``None``: it is the table of a library this process loaded with
    :func:`._loader.open_library` (:data:`OWN_TABLES`); or its image exports
    ``TorchDLPackExchangeAPIPtr``
    (the build contract of this package and of the one it replaces) and that returns
    exactly ``address``; or its image is torch's own ``libtorch_python`` (whose main
    branch had the legacy int for a few weeks). Data elsewhere that happens to look
    like a table (torch's libraries hold several) is not trusted."""
    if address in OWN_TABLES:
        return OWN_LIBRARY
    name = _IMAGE_NAMES.get(base, b"")
    if os.path.basename(name).startswith(b"libtorch_python"):
        return "torch's own libtorch_python"
    handle = _exporting_image(name, address)
    if handle is None:
        return None
    if hasattr(handle, EXPORT_BUILD_INFO):  # only this package's libraries say their build
        return OWN_LIBRARY
    # The same export without the build info: tvm-ffi's own torch addon (JIT-built by
    # tvm-ffi where this package was not installed) or torch-c-dlpack-ext 0.1.x. Trusted as
    # a table (it passed every check), but named as what it is, never as ours.
    return f"{os.path.basename(os.fsdecode(name))} ({FOREIGN_LIBRARY})"


def _exporting_image(name: bytes, address: int) -> ctypes.CDLL | None:
    """A handle on the loaded image ``name`` if its ``TorchDLPackExchangeAPIPtr()``
    returns exactly ``address``."""
    if not name:
        return None
    try:  # RTLD_NOLOAD: a handle on the image already there, never a new load
        handle = ctypes.CDLL(os.fsdecode(name), mode=os.RTLD_NOLOAD | ctypes.RTLD_LOCAL)
        export = getattr(handle, EXPORT_TABLE)
    except (OSError, AttributeError, ValueError):
        return None
    export.restype, export.argtypes = ctypes.c_void_p, []
    return handle if export() == address else None


#: What a library exporting ``TorchDLPackExchangeAPIPtr`` but no build info is.
FOREIGN_LIBRARY = (
    "a library exporting TorchDLPackExchangeAPIPtr without this package's build info: "
    "tvm-ffi's torch addon or torch-c-dlpack-ext 0.1.x"
)


def _mapping_permissions() -> list[tuple[int, int, str]] | None:
    """``(start, end, permissions)`` of every mapping of this process, from
    ``/proc/self/maps``; ``None`` where that does not exist (macOS, Windows)."""
    try:
        with open("/proc/self/maps", encoding="ascii", errors="replace") as maps:
            lines = maps.read().splitlines()
    except OSError:
        return None
    found = []
    for line in lines:
        fields = line.split(None, 2)
        if len(fields) < 2 or "-" not in fields[0]:
            continue
        start, _, end = fields[0].partition("-")
        try:
            found.append((int(start, 16), int(end, 16), fields[1]))
        except ValueError:
            continue
    return found


def _permissions_at(mappings: list[tuple[int, int, str]], address: int) -> str:
    for start, end, permissions in mappings:
        if start <= address < end:
            return permissions
    return ""


def check_table_pointer(address: int, where: str) -> tuple[int, int]:
    """:func:`table_origin` without the origin: the table's DLPack version."""
    return table_origin(address, where)[0]


def table_origin(address: int, where: str) -> tuple[tuple[int, int], str]:
    """Validate an exchange table's address taken from outside (the legacy int, a
    capsule's pointer) before trusting it; return its DLPack version.

    Strict, because a wrong answer is a SIGSEGV in the first consumer: the whole
    ``DLPackExchangeAPI`` lies inside ONE loaded image, in a readable, NON-executable
    mapping of it, and the image is one that publishes tables
    (:func:`_table_provenance`); only then is it read (:func:`check_table`:
    version, non-NULL members), and every member must point into an EXECUTABLE mapping
    of that SAME image. Returns ``(DLPack version, origin)``, the origin
    :data:`OWN_LIBRARY` or torch's. (Data that merely looks like pointers, such as words of another
    library's tables, fails the last check.) Permissions come from ``/proc/self/maps``
    (Linux); elsewhere only the image checks (``dladdr``) apply. Raises
    :class:`~torch_c_dlpack_ext.errors.LibraryLoadError` saying which check failed.
    """
    from _torch_c_dlpack_ext_core.dlpack_ctypes import EXCHANGE_API_MEMBERS, DLPackExchangeAPI
    from _torch_c_dlpack_ext_core.errors import LibraryLoadError, brief

    size = ctypes.sizeof(DLPackExchangeAPI)
    if not 0 < address < (1 << 63) - size or address % ctypes.alignment(DLPackExchangeAPI):
        raise LibraryLoadError(f"{where} = {brief(address)} is not a valid table address")
    base = mapped_image_base(address)
    if base is None or mapped_image_base(address + size - 1) != base:
        raise LibraryLoadError(
            f"{where} = {address:#x} does not point into a loaded shared library"
        )
    mappings = _mapping_permissions()
    if mappings is not None:
        for end in (address, address + size - 1):
            permissions = _permissions_at(mappings, end)
            if not permissions.startswith("r") or "x" in permissions:
                raise LibraryLoadError(
                    f"{where} = {address:#x} is not in a readable data segment "
                    f"(mapping {permissions or 'absent'}): not an exchange table"
                )
    origin = "torch" if sys.platform == "win32" else _table_provenance(address, base)
    if origin is None:
        raise LibraryLoadError(
            f"{where} = {address:#x} is not the table of a torch-c-dlpack-ext library or "
            "of torch itself (data that only looks like one)"
        )
    version = check_table(address, where)
    table = DLPackExchangeAPI.from_address(address)
    for name in EXCHANGE_API_MEMBERS:
        target = ctypes.cast(getattr(table, name), ctypes.c_void_p).value or 0
        if mapped_image_base(target) != base:
            raise LibraryLoadError(
                f"{where}: member {name} ({target:#x}) does not point into the library "
                "that holds the table"
            )
        if mappings is not None and "x" not in _permissions_at(mappings, target):
            raise LibraryLoadError(
                f"{where}: member {name} ({target:#x}) does not point into executable code"
            )
    return version, origin


def check_legacy_pointer(value: object) -> tuple[int, tuple[int, int]]:
    """Validate a legacy ``__c_dlpack_exchange_api__`` value before anything reads it;
    return ``(address, DLPack version)``.

    It must be an int (not a bool), and the table it names must pass
    :func:`check_table_pointer`. No released torch ever set this int (only the
    package this one replaces did, pointing at its own library's table), so the strict
    check refuses nothing real. Raises
    :class:`~torch_c_dlpack_ext.errors.LibraryLoadError` saying which check failed.
    """
    from _torch_c_dlpack_ext_core.errors import LibraryLoadError, brief

    where = f"torch.Tensor.{LEGACY_INT_ATTR}"
    if isinstance(value, bool) or not isinstance(value, int):
        raise LibraryLoadError(f"{where} is {type(value).__name__} {brief(value)}, not an address")
    address = int(value)
    return address, check_table_pointer(address, where)


def _judge_attributes(tensor: object) -> tuple[bool, bool, tuple[str, ...], str]:
    """``(valid capsule, valid legacy int, problems, origin of the valid capsule)`` of
    ``tensor``'s two attributes. A capsule is valid when ``PyCapsule_IsValid`` accepts
    it AND its pointer passes :func:`table_origin`, as strict as for the legacy int."""
    from _torch_c_dlpack_ext_core.errors import TorchCDLPackExtError, brief

    problems: list[str] = []
    missing = object()
    try:
        capsule = getattr(tensor, CAPSULE_ATTR, missing)
    except Exception as exc:
        capsule, problems = missing, [f"reading torch.Tensor.{CAPSULE_ATTR} raised {exc!r:.100}"]
    if capsule is not missing:  # someone set one (not the common case): judge it
        if is_exchange_capsule(capsule):
            where = f"torch.Tensor.{CAPSULE_ATTR}'s pointer"
            try:
                return True, False, (), table_origin(capsule_pointer(capsule), where)[1]
            except TorchCDLPackExtError as exc:
                problems.append(str(exc))
        else:
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
        return False, False, tuple(problems), ""
    try:
        check_legacy_pointer(legacy)
    except TorchCDLPackExtError as exc:
        problems.append(str(exc))
        return False, False, tuple(problems), ""
    return False, True, tuple(problems), ""


def describe_torch(torch: ModuleType) -> TorchInfo:
    """Describe an imported ``torch`` module.

    Asks no device anything (:func:`detect_backend`). Raises what torch raises (no
    ``__version__``, a failing ``compiled_with_cxx11_abi``): the caller reports that
    torch cannot be described.
    """
    abi = cxx11_abi_of(torch)
    version_mod = getattr(torch, "version", None)
    version = torch.__version__
    if not isinstance(version, str):
        raise TypeError(f"torch.__version__ is {type(version).__name__}, not a string")
    has_capsule, has_legacy_int, bogus, origin = _judge_attributes(torch.Tensor)
    cuda, hip = getattr(version_mod, "cuda", None), getattr(version_mod, "hip", None)
    return TorchInfo(
        version=str(version),
        backend=detect_backend(torch),
        cxx11_abi=abi,
        cuda_version=cuda if isinstance(cuda, str) else None,
        hip_version=hip if isinstance(hip, str) else None,
        has_capsule=has_capsule,
        has_legacy_int=has_legacy_int,
        bogus_attributes=bogus,
        # torch's own table is the default (""); anything else is named.
        capsule_origin="" if origin.startswith("torch") else origin,
        has_to_dlpack=callable(getattr(getattr(torch, "_C", None), "_to_dlpack", None)),
        python=running_python(),
    )


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
