"""The import's common path (:func:`load_common`), the exchange ABI's names, and the
steps every load takes: verify, dlopen, check the table, publish on ``torch.Tensor``."""

# load_common handles the common case with this module alone: no TORCH_C_DLPACK_EXT_*
# variable, neither attribute on torch.Tensor, a valid manifest and a matching library
# that loads. Anything else (and any failure on the way) returns None before anything
# changed, and the package's __init__ runs _selector, the full selector, which decides
# with _select.decide, acts, and says why in one warning; it is imported only then.
#
# Every check of the full path is kept: the manifest schema, the library's size and
# sha256, its ELF extents, a sealed in-memory copy for dlopen (RTLD_NOW | RTLD_LOCAL),
# the table check. Attributes are set only after the table passed every check, so a
# consumer never sees a half-valid API.
#
# This module is what every `import tvm_ffi` on torch < 2.10 executes, so it is written
# for that (measured with `nox -s bench`, see CONTRIBUTING "The import's common path"):
# one module (each more costs a file lookup and an unmarshal), comments rather than
# docstrings (the first unmarshal in a process costs about 6 us per KiB of bytecode),
# string paths rather than pathlib, no class created at import or on the common path (a
# ctypes prototype or array type is a class; the calls below use instances of classes
# ctypes already has), and no realpath (a system call per path component). It restates
# the core's names, the manifest schema's checks and bounds and the torch version's
# reading as plain functions over the JSON; unit tests pin each to the core's (naming,
# manifest.py, dlpack_ctypes): the common path accepts only what the core accepts, and
# the core's messages explain everything else.

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import stat
import struct
import sys
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

    #: What LIBRARIES keeps of a loaded library (see there).
    Record = tuple[str, int | ctypes.CDLL, int, tuple[int, int]]

__all__ = [
    "CAPSULE_ATTR",
    "CAPSULE_NAME",
    "ENV_PREFIX",
    "EXPORT_BUILD_INFO",
    "EXPORT_TABLE",
    "LEGACY_INT_ATTR",
    "LIBRARIES",
    "LOCK",
    "MAX_LIBRARY_BYTES",
    "OWN_TABLES",
    "SUPPORTED_MAJOR",
    "TABLE_HEADER_BYTES",
    "TABLE_MEMBERS",
    "backend_of",
    "check_elf_image",
    "check_table",
    "cxx11_abi_of",
    "dlopen",
    "load_common",
    "load_error",
    "make_capsule",
    "private_copy",
    "publish",
    "pythonapi_function",
    "short_path",
    "table_pointer",
    "torch_minor_of",
]

# --------------------------------------------------------------------------------------
# The exchange ABI's names (`_torch_c_dlpack_ext_core.naming` and the mirrors in
# `dlpack_ctypes` are their sources; a unit test keeps them equal).
# --------------------------------------------------------------------------------------

#: The attribute torch 2.10+ sets on `torch.Tensor` (a PyCapsule), and the one we publish.
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
#: The DLPack major version whose `DLPackExchangeAPI` layout this package reads.
SUPPORTED_MAJOR = 1
#: The two numbers of the `DLPackExchangeAPI` layout check_table reads: the
#: header (`DLPackVersion` of two uint32, then the `prev_api` pointer) and the count of
#: function pointers after it.
TABLE_HEADER_BYTES = 8 + ctypes.sizeof(ctypes.c_void_p)
TABLE_MEMBERS = 5
#: Tables of the libraries this process loaded and checked: a table found on
#: `torch.Tensor` later is known to be ours.
OWN_TABLES: set[int] = set()

# The table as native C lays it out: two uint32, then prev_api and the members (pointers).
_TABLE = struct.Struct(f"@II{1 + TABLE_MEMBERS}P")

#: Serialises loading and publishing (imports from threads, build_for_current_torch).
LOCK = threading.RLock()
#: Libraries this process loaded, by their file's identity (device, inode: the same file
#: under another name is the same library), each `(path, dlopen handle, table pointer,
#: DLPack version)`; `_library.LoadedLibrary` is the view of one. They stay referenced
#: for the life of the process: the published pointer points into them, so they must
#: never be unloaded.
LIBRARIES: dict[tuple[int, int], Record] = {}

# The manifest schema's bounds and fields (`_torch_c_dlpack_ext_core.manifest`; a unit
# test keeps them equal). The most a library file may be is the manifest's bound.
MAX_LIBRARY_BYTES = 1 << 32
_SCHEMA_VERSION = 1
_MAX_MANIFEST_BYTES = 1 << 20
_MAX_ENTRIES = 1024
_MAX_TEXT = 256
_MAX_FILE_PATH = 512
_MANIFEST_NAME = "manifest.json"
_BACKENDS = ("cpu", "cuda", "rocm")
_FIELDS = (
    "file",
    "torch",
    "torch_build",
    "backend",
    "cxx11_abi",
    "dlpack",
    "toolchain",
    "gpu_toolkit",
    "platform",
    "python",
    "size",
    "sha256",
)
_FIELD_SET = frozenset(_FIELDS)
_TEXT_FIELDS = ("torch", "torch_build", "dlpack", "toolchain", "gpu_toolkit", "platform", "python")
_HEX = "0123456789abcdef"
# O_NONBLOCK: a FIFO planted where a file should be must not block the import.
_OPEN_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)
# A library on the common path is opened without following a symbolic link (below).
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)

# RTLD_NOW: every symbol is bound at dlopen, so a library that needs one torch lacks fails
# here (with the symbol's name) instead of at its first call. RTLD_LOCAL: it resolves
# torch's symbols from the libraries `import torch` loaded and exports nothing to others.
_DLOPEN_MODE = getattr(os, "RTLD_NOW", 2) | ctypes.RTLD_LOCAL


# --------------------------------------------------------------------------------------
# The running torch as the import reads it (the full path's TorchInfo too).
# --------------------------------------------------------------------------------------


def backend_of(torch: Any) -> str:
    # The backend of a torch module, by its build flavour: `torch.version.hip` set ->
    # `"rocm"`, else `torch.version.cuda` set -> `"cuda"`, else `"cpu"`.
    #
    # No device is asked: `torch.cuda.is_available()` runs `cudaGetDeviceCount`, which
    # initialises the driver (`cuInit`), poisons later `fork()`s and freezes
    # `CUDA_VISIBLE_DEVICES` in every process that imports tvm-ffi (docs/facts.md, "The
    # backend is the build flavour"). A GPU torch on a host without a device gets its
    # backend's library, which serves CPU tensors too.
    #
    # getattr keeps builds whose torch.version lacks cuda or hip safe.
    version = getattr(torch, "version", None)
    if getattr(version, "hip", None) is not None:
        return "rocm"
    if getattr(version, "cuda", None) is not None:
        return "cuda"
    return "cpu"


def cxx11_abi_of(torch: Any) -> bool | None:
    # `torch.compiled_with_cxx11_abi()`; `None` where not applicable (Windows, macOS,
    # a torch without it). Raises what torch raises.
    if sys.platform.startswith(("win", "darwin")):
        return None
    compiled = getattr(torch, "compiled_with_cxx11_abi", None)
    return bool(compiled()) if callable(compiled) else None


def torch_minor_of(version: str) -> tuple[int, int] | None:
    # `(major, minor)` of a torch version such as `2.8.0a0+abc`, or `None` where
    # `naming.torch_minor` raises (a unit test compares the two on any text).
    major, dot, rest = version.lstrip().partition(".")
    end = 0
    while end < len(rest) and rest[end].isdecimal():
        end += 1
    if not (dot and major.isdecimal() and 0 < end <= 9 and len(major) <= 9):
        return None
    return int(major), int(rest[:end])


# --------------------------------------------------------------------------------------
# The capsule and the table.
# --------------------------------------------------------------------------------------


def pythonapi_function(name: str, restype: Any, *argtypes: Any) -> Any:
    # A private prototype of the C-API function `name`: an instance of the class ctypes
    # made for `pythonapi` (GIL held, Python errors checked) with its own `restype` and
    # `argtypes`. Never `ctypes.pythonapi.<name>` itself, whose types other packages may
    # set; never a new `PYFUNCTYPE` class, which would be a class creation per import.
    function = ctypes.pythonapi._FuncPtr((name, ctypes.pythonapi))
    function.restype = restype
    function.argtypes = argtypes
    return function


def make_capsule(pointer: int) -> Any:
    # A PyCapsule named `dlpack_exchange_api` wrapping `pointer` (no destructor:
    # the table is static in a library that is never unloaded).
    # The capsule keeps the name's address, not a copy, and outlives this module (it sits
    # on torch.Tensor): one reference to the name is never given back, so the bytes stay.
    pythonapi_function("Py_IncRef", None, ctypes.py_object)(CAPSULE_NAME)
    new = pythonapi_function(
        "PyCapsule_New", ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p
    )
    return new(pointer, CAPSULE_NAME, None)


def check_table(pointer: int, origin: str) -> tuple[int, int]:
    # Check the `DLPackExchangeAPI` at `pointer`; return its DLPack version.
    #
    # Raises _torch_c_dlpack_ext_core.errors.LibraryLoadError if the pointer is
    # NULL, the major version is not 1, or any member is NULL (named through the mirrors).
    if not pointer:
        raise load_error(f"{origin}: {EXPORT_TABLE}() returned NULL")
    major, minor, _prev_api, *members = _TABLE.unpack(ctypes.string_at(pointer, _TABLE.size))
    if major != SUPPORTED_MAJOR:
        raise load_error(
            f"{origin}: exchange table has DLPack version {major}.{minor}, "
            f"this loader reads major version {SUPPORTED_MAJOR}",
            "upgrade torch-c-dlpack-ext or rebuild the library",
        )
    if not all(members):
        from _torch_c_dlpack_ext_core.dlpack_ctypes import EXCHANGE_API_MEMBERS

        missing = [name for name, member in zip(EXCHANGE_API_MEMBERS, members) if not member]
        raise load_error(
            f"{origin}: exchange table has NULL member(s) {', '.join(missing)}",
            "the library is incomplete: rebuild it",
        )
    return major, minor


# --------------------------------------------------------------------------------------
# The common path.
# --------------------------------------------------------------------------------------


def load_common(package_dir: str) -> dict[str, Any] | None:
    # Publish the bundled library matching the running torch, when nothing is unusual,
    # and return the import's status fields (`_status.StatusFields`, which this module
    # does not import: `_status` reaches back here through `_torchinfo`); `None`
    # otherwise (before anything was changed), for the full selector to decide,
    # act and explain. The same decision the selector would make (a unit test compares
    # them): no attribute to judge, the first matching manifest entry. The caller has
    # checked that no `TORCH_C_DLPACK_EXT_*` variable is set.
    with LOCK:
        try:
            import torch

            tensor = torch.Tensor
            if hasattr(tensor, CAPSULE_ATTR) or hasattr(tensor, LEGACY_INT_ATTR):
                return None
            verified = _matching_library(torch, package_dir)
            loaded = _open(*verified) if verified is not None else None
        except Exception:  # the full selector meets the same and reports it
            return None
        if loaded is None:
            return None
        publish(torch, loaded[2])
        return {"kind": "load", "library": loaded[0], "common_path": True}


def _matching_library(torch: Any, package_dir: str) -> tuple[str, bytes, os.stat_result] | None:
    # The manifest entry the selector would load first for this torch, verified:
    # `(path, bytes, stat)`, or None (no valid manifest, no match, a failed check).
    version = torch.__version__
    wanted = torch_minor_of(version) if isinstance(version, str) else None
    if wanted is None:
        return None
    entries = _read_manifest(os.path.join(package_dir, _MANIFEST_NAME))
    if not entries:
        return None
    backend, abi = backend_of(torch), cxx11_abi_of(torch)
    matching = [
        entry
        for entry in entries
        if _minor_of_entry(entry) == wanted
        and entry["backend"] == backend
        and entry["cxx11_abi"] == abi
        and (entry["cxx11_abi"] is None) == (abi is None)
    ]
    if not matching:
        return None
    # The selector's order: the build of the exact running torch first, then by file.
    first = min(matching, key=lambda e: (e["torch_build"] != version, e["file"]))
    return _read_verified(first, package_dir)


def _minor_of_entry(entry: dict[str, Any]) -> tuple[int, int]:
    major, minor = entry["torch"].split(".")
    return int(major), int(minor)


def _read_regular(
    path: str, limit: int, size: int | None = None, flags: int = 0
) -> tuple[bytes, os.stat_result] | None:
    # The bytes of the regular file `path` (opened without blocking, with `flags`
    # added) and its stat, if it has at most `limit` bytes (exactly `size`, when
    # given) and it did not grow while being read.
    try:
        fd = os.open(path, _OPEN_FLAGS | flags)
    except (OSError, ValueError):
        return None
    try:
        info = os.fstat(fd)
        expected = info.st_size
        if not stat.S_ISREG(info.st_mode) or expected > limit:
            return None
        if size is not None and expected != size:
            return None
        # One byte more than stat says: a file that grew meanwhile is refused.
        data = read_fd(fd, expected + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return (data, info) if len(data) == expected else None


def read_fd(fd: int, limit: int) -> bytes:
    # Up to `limit` bytes of an open regular file, from its current offset. A read of a
    # regular file that returns less than asked has met the end (EINTR is retried by
    # Python), so no second read is spent to see the end.
    chunks: list[bytes] = []
    total = 0
    while total < limit:
        want = min(1 << 30, limit - total)
        chunk = os.read(fd, want)
        chunks.append(chunk)
        total += len(chunk)
        if len(chunk) < want:
            break
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _read_manifest(path: str) -> list[dict[str, Any]] | None:
    # The entries of a manifest that passes every check of
    # `_torch_c_dlpack_ext_core.manifest.load_manifest`, as JSON objects; None for any
    # manifest it would refuse (it then says why).
    read = _read_regular(path, _MAX_MANIFEST_BYTES)
    if read is None or not read[0].strip():
        return None
    try:
        data = json.loads(read[0].decode("utf-8"))
    except (ValueError, RecursionError):  # not UTF-8, not JSON, too deep
        return None
    schema = data.get("schema") if isinstance(data, dict) else None
    libraries = data.get("libraries") if type(schema) is int and schema == _SCHEMA_VERSION else None
    valid = (
        isinstance(libraries, list)
        and len(libraries) <= _MAX_ENTRIES
        and all(isinstance(entry, dict) and _valid_entry(entry) for entry in libraries)
    )
    return libraries if valid else None


def _is_number(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= 6


def _valid_entry(entry: dict[str, Any]) -> bool:
    # Whether `ManifestEntry.from_json` accepts `entry` (the same checks). Run for every
    # entry on every import (a release's combined wheel lists twenty), so written as
    # plain loops and C calls: no generator, no helper call per field.
    if not entry.keys() >= _FIELD_SET:
        return False
    for name in _TEXT_FIELDS:
        value = entry[name]
        text = isinstance(value, str) and 0 < len(value) <= _MAX_TEXT and value.isprintable()
        if not text and (value is not None or name != "gpu_toolkit"):
            return False
    file, abi, size, sha = entry["file"], entry["cxx11_abi"], entry["size"], entry["sha256"]
    if not (
        isinstance(file, str)
        and 0 < len(file) <= _MAX_FILE_PATH
        and file.isprintable()
        and "\\" not in file
        and ":" not in file
        and entry["backend"] in _BACKENDS
        and (abi is None or abi is True or abi is False)
        and type(size) is int
        and 0 < size <= MAX_LIBRARY_BYTES
        and type(sha) is str
        and len(sha) == 64
        and not sha.strip(_HEX)
    ):
        return False
    for part in file.split("/"):
        if part in ("", ".", "..") or len(part) > 255:
            return False
    major, dot, minor = entry["torch"].partition(".")
    python = entry["python"]
    py_major, py_dot, py_minor = python.removesuffix("t").partition(".")
    return bool(dot and _is_number(major) and _is_number(minor)) and (
        python == "abi3" or bool(py_dot and _is_number(py_major) and _is_number(py_minor))
    )


def _read_verified(
    entry: dict[str, Any], package_dir: str
) -> tuple[str, bytes, os.stat_result] | None:
    # `(path, bytes, stat)` of the entry's library if `manifest.read_verified` would
    # return them: a regular file inside the package of exactly the recorded size and
    # sha256. Inside is proven without resolving the path (realpath costs a system call
    # per component of where the package is installed): no directory between the package
    # and the file, nor the file itself, may be a symbolic link. A link that stays inside
    # the package, which the core accepts, goes to the full selector.
    parts = entry["file"].split("/")
    path = package_dir
    for part in parts[:-1]:
        path = os.path.join(path, part)
        try:
            if not stat.S_ISDIR(os.lstat(path).st_mode):
                return None
        except (OSError, ValueError):
            return None
    path = os.path.join(path, parts[-1])
    if not _NOFOLLOW:  # no O_NOFOLLOW (Windows): look at the last component first
        try:
            if stat.S_ISLNK(os.lstat(path).st_mode):
                return None
        except (OSError, ValueError):
            return None
    read = _read_regular(path, entry["size"], entry["size"], _NOFOLLOW)
    if read is None or hashlib.sha256(read[0]).hexdigest() != entry["sha256"]:
        return None
    return path, read[0], read[1]


# --------------------------------------------------------------------------------------
# Loading one library (both paths).
# --------------------------------------------------------------------------------------


def load_error(message: str, remedy: str = "") -> Exception:
    # A `LibraryLoadError` (its module is imported only when one is made).
    from _torch_c_dlpack_ext_core.errors import LibraryLoadError

    return LibraryLoadError(message, remedy)


def short_path(path: Path | str) -> str:
    # A path for messages: whole when reasonable, else its start and its end.
    text = str(path)
    return text if len(text) <= 160 else f"{text[:60]}...{text[-60:]} ({len(text)} characters)"


_ELF_MAGIC = b"\x7fELF"
_PT_LOAD = 1


def check_elf_image(data: bytes | memoryview, path: Path | str) -> None:
    # Refuse an ELF image whose headers point past its end (`path` names it).
    #
    # dlopen maps every loadable segment; touching a page beyond the end of a truncated
    # file raises SIGBUS, which kills the process (no `except` helps). A manifest
    # checksum cannot catch a file that was truncated before it was hashed, so the extents
    # are checked too. Non-ELF data is left to dlopen, which rejects it with an ordinary
    # error.
    size = len(data)
    if size < 16 or bytes(data[:4]) != _ELF_MAGIC:
        return
    is64, order = data[4] == 2, "<" if data[5] == 1 else ">"
    header = struct.Struct(order + ("HHIQQQIHHHHHH" if is64 else "HHIIIIIHHHHHH"))
    if size < 16 + header.size:
        raise _elf_error(path, "truncated ELF header")
    fields = header.unpack_from(data, 16)
    phoff, shoff = fields[4], fields[5]
    phentsize, phnum, shentsize, shnum = fields[8], fields[9], fields[10], fields[11]
    if phoff + phnum * phentsize > size or (shoff and shoff + shnum * shentsize > size):
        raise _elf_error(path, f"truncated ({size} bytes, its ELF headers describe more)")
    segment = struct.Struct(order + ("IIQQQQQQ" if is64 else "IIIIIIII"))
    for index in range(phnum):
        start = phoff + index * phentsize
        if start + segment.size > size:
            raise _elf_error(path, "truncated ELF program headers")
        values = segment.unpack_from(data, start)
        offset, filesz = (values[2], values[5]) if is64 else (values[1], values[4])
        if values[0] == _PT_LOAD and offset + filesz > size:
            raise _elf_error(
                path,
                f"truncated: a loadable segment ends at byte {offset + filesz}, "
                f"the file has {size}",
            )


def _elf_error(path: Path | str, problem: str) -> Exception:
    from _torch_c_dlpack_ext_core.errors import REINSTALL

    return load_error(f"{short_path(path)}: {problem}", REINSTALL)


# Descriptors of the private copies dlopen loaded, kept open for the life of the
# process: the number stays ours, so `/proc/self/fd/N` names only our library.
_PRIVATE_COPIES: list[int] = []


def private_copy(path: str, data: bytes) -> str | None:
    # A sealed in-memory copy of `data` for dlopen (`/proc/self/fd/N` of a memfd named
    # after `path`), or `None` where that is unavailable (not Linux, no memfd, no /proc).
    #
    # Loading a private copy makes the bytes loaded exactly the bytes verified: a file
    # swapped after the check, or truncated in place during (or after) dlopen, cannot reach
    # the process (a truncated mapping would be a SIGBUS).
    create = getattr(os, "memfd_create", None)
    if create is None or not os.path.isdir("/proc/self/fd"):
        return None
    flags = getattr(os, "MFD_CLOEXEC", 1) | getattr(os, "MFD_ALLOW_SEALING", 2)
    try:
        fd = create(os.path.basename(path)[:200] or "library", flags)
    except (OSError, ValueError):
        return None
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        try:  # no one (not even us) can change the copy now
            import fcntl

            seals = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
        except (ImportError, AttributeError, OSError):
            pass
    except OSError:
        os.close(fd)
        return None
    _PRIVATE_COPIES.append(fd)
    return f"/proc/self/fd/{fd}"


def dlopen(target: str) -> int | ctypes.CDLL:
    # The handle of `target` opened `RTLD_NOW | RTLD_LOCAL` (raises OSError): the bare
    # dlopen handle where `_ctypes` offers dlopen (POSIX), else a CDLL (Windows); a CDLL
    # costs a class creation, so it is made only when needed (`_library.LoadedLibrary`).
    import _ctypes

    raw = getattr(_ctypes, "dlopen", None)
    if raw is None:
        return ctypes.CDLL(target, mode=_DLOPEN_MODE)
    handle: int = raw(target, _DLOPEN_MODE)
    return handle


def table_pointer(handle: int | ctypes.CDLL) -> int | None:
    # What the library's `TorchDLPackExchangeAPIPtr()` returns; `None` if it lacks
    # the export.
    if isinstance(handle, ctypes.CDLL):
        try:
            func = getattr(handle, EXPORT_TABLE)
        except AttributeError:
            return None
    else:
        import _ctypes

        try:
            address = _ctypes.dlsym(handle, EXPORT_TABLE)
        except OSError:
            return None
        # An instance of a class ctypes already has (no prototype class to create): a
        # call that keeps the GIL, which the export, returning a static address, needs
        # no release of.
        func = ctypes.pythonapi._FuncPtr(address)
    func.restype = ctypes.c_int64
    func.argtypes = ()
    return int(func())


def _open(path: str, data: bytes, info: os.stat_result) -> Record:
    # `_library.open_library` for bytes verified on the common path, whose stat is known.
    key = (info.st_dev, info.st_ino)
    record = LIBRARIES.get(key)
    if record is not None:
        return record
    check_elf_image(data, path)
    target = private_copy(path, data) or path
    handle = dlopen(target)
    pointer = table_pointer(handle)
    if pointer is None:
        raise load_error(f"{short_path(path)}: does not export {EXPORT_TABLE}")
    record = (path, handle, pointer, check_table(pointer, path))
    LIBRARIES[key] = record
    OWN_TABLES.add(pointer)
    return record


def publish(torch: Any, pointer: int) -> None:
    # Set the capsule and the legacy int attribute on `torch.Tensor`.
    capsule = make_capsule(pointer)
    with LOCK:
        setattr(torch.Tensor, CAPSULE_ATTR, capsule)
        setattr(torch.Tensor, LEGACY_INT_ATTR, pointer)
