"""The import's common path (:func:`load_common`: a valid manifest, then the matching
library or the portable table), the exchange ABI's names, and the steps every load takes:
verify, ELF extents, sealed copy, dlopen, check the table, publish on ``torch.Tensor``."""

# load_common handles the common case with this module alone: no TORCH_C_DLPACK_EXT_*
# variable, neither attribute on torch.Tensor, a valid manifest and a matching library
# that loads. Anything else (and any failure on the way) returns None before anything
# changed, and the package's __init__ runs _apply, the full selector, which decides
# with _decide.decide, acts, and says why in one warning; it is imported only then.
#
# Every check of the full path is kept: the manifest schema, the library's size and
# sha256, its ELF extents, a sealed in-memory copy for dlopen (RTLD_NOW | RTLD_LOCAL),
# the table check. Attributes are set only after the table passed every check, so a
# consumer never sees a half-valid API.
#
# This module is what every `import tvm_ffi` on torch < 2.10 executes, so it holds only
# what that path runs, written for its cost (CONTRIBUTING "The import's common path"):
# unmarshalling it is mostly interning its identifiers (~0.45 us each the first time in a
# process that imported torch, whose interned table is large; line tables and plain
# strings cost next to nothing), so no docstrings, no message formatting (a failure
# here returns None, and _library and the full selector, which redo the step, say why),
# no function the path does not call, no Python call per manifest entry on the native
# path (a unit test pins it); string paths rather than pathlib; no class created at
# import or on the path (a ctypes prototype or array type is a class: the calls below
# use instances of classes ctypes already has); no realpath (a system call per path
# component). It restates the core's names, the manifest schema's checks and bounds and
# the torch version's reading as plain functions over the JSON; unit tests pin each to
# the core's (naming, manifest.py, dlpack_ctypes): the common path accepts only what the
# core accepts.

from __future__ import annotations

import _ctypes
import ctypes
import hashlib
import json
import os
import stat
import struct
import sys
import threading
from operator import itemgetter
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    # Types for the checker alone: at run time they would cost imports and class
    # creations on the common path.
    from _ctypes import CFuncPtr, _CDataType
    from types import ModuleType
    from typing import Literal, TypedDict

    #: What LIBRARIES keeps of a loaded library (see there).
    Record = tuple[str, int | ctypes.CDLL, int, tuple[int, int]]
    #: What load_common published: `(kind, library)`, the decision's kind ("load": a
    #: native library, "portable": the portable table) and the library's path.
    CommonLoad = tuple[Literal["load", "portable"], str]

    class Entry(TypedDict):
        #: A manifest entry as JSON, once _valid_entries has checked it
        #: (`_torch_c_dlpack_ext_core.manifest.ManifestEntry` is the core's model).
        torch: str
        torch_build: str
        dlpack: str
        toolchain: str
        platform: str
        python: str
        gpu_toolkit: str | None
        file: str
        backend: str
        cxx11_abi: bool | None
        size: int
        sha256: str


# The exchange ABI's names (`_torch_c_dlpack_ext_core.naming` and the mirrors in
# `dlpack_ctypes` are their sources; a unit test keeps them equal).
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
#: The `DLPackExchangeAPI` layout check_table reads: the header (`DLPackVersion` of two
#: uint32, then the `prev_api` pointer) and the count of function pointers after it.
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
# A torch-agnostic entry (the portable library) says "any" in torch, torch_build and
# backend, and null in cxx11_abi and gpu_toolkit: all five or none.
_ANY = "any"
_AGNOSTIC = (_ANY, _ANY, _ANY, None, None)
_ABI3 = "abi3"
# Every field an entry must have (`manifest.REQUIRED_FIELDS`), in the order
# _valid_entries reads them as columns: the text fields first (torch and python also as
# numbers), then gpu_toolkit (text or null).
_ENTRY_COLUMNS = (
    "torch",
    "torch_build",
    "dlpack",
    "toolchain",
    "platform",
    "python",
    "gpu_toolkit",
    "file",
    "backend",
    "cxx11_abi",
    "size",
    "sha256",
)
_entry_values = itemgetter(*_ENTRY_COLUMNS)
_BACKEND_SET = frozenset((*_BACKENDS, _ANY))
_ABI_TYPES = frozenset((bool, type(None)))
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


# The running torch as the import reads it (the full path's TorchInfo too).


def backend_of(torch: ModuleType) -> str:
    # The backend of a torch module, by its build flavour: `torch.version.hip` set ->
    # `"rocm"`, else `torch.version.xpu` set -> `"xpu"` (no native library serves it: the
    # portable table does), else `torch.version.cuda` set -> `"cuda"`, else `"cpu"`.
    #
    # No device is asked: `torch.cuda.is_available()` runs `cudaGetDeviceCount`, which
    # initialises the driver (`cuInit`), poisons later `fork()`s and freezes
    # `CUDA_VISIBLE_DEVICES` in every process that imports tvm-ffi (docs/facts.md, "The
    # backend is the build flavour"). A GPU torch on a host without a device gets its
    # backend's library, which serves CPU tensors too. getattr keeps builds whose
    # torch.version lacks cuda or hip safe.
    version = getattr(torch, "version", None)
    if getattr(version, "hip", None) is not None:
        return "rocm"
    if getattr(version, "xpu", None) is not None:
        return "xpu"
    return "cpu" if getattr(version, "cuda", None) is None else "cuda"


def cxx11_abi_of(torch: ModuleType) -> bool | None:
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


# The capsule and the table.


def pythonapi_function(
    name: str, restype: type[_CDataType] | None, *argtypes: type[_CDataType]
) -> CFuncPtr:
    # A private prototype of the C-API function `name`: an instance of the class ctypes
    # made for `pythonapi` (GIL held, Python errors checked) with its own `restype` and
    # `argtypes`. Never `ctypes.pythonapi.<name>` itself, whose types other packages may
    # set; never a new `PYFUNCTYPE` class, which would be a class creation per import.
    function = ctypes.pythonapi._FuncPtr((name, ctypes.pythonapi))
    function.restype = restype
    function.argtypes = argtypes
    return function


def make_capsule(pointer: int) -> object:
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
    # Check the `DLPackExchangeAPI` at `pointer` (not NULL, DLPack major version 1, no
    # NULL member); return its DLPack version. Raises
    # _torch_c_dlpack_ext_core.errors.LibraryLoadError naming what is wrong and where
    # (`origin`: the library or attribute it came from).
    values = _TABLE.unpack(ctypes.string_at(pointer, _TABLE.size)) if pointer else None
    if values is not None and values[0] == SUPPORTED_MAJOR and all(values[3:]):
        return values[0], values[1]
    from _torch_c_dlpack_ext_core.errors import table_error

    raise table_error(origin, values)


# The common path.


def load_common(torch: ModuleType, package_dir: str) -> CommonLoad | None:
    # Publish the bundled library matching `torch` (the running one, which the caller
    # imported), when nothing is unusual, and return what was published (`CommonLoad`: a
    # tuple, because a record class would be a class creation on every import); `None`
    # otherwise (before anything was changed), for the full selector to decide, act and
    # explain. The same decision the selector would make (a unit test compares them): no
    # attribute to judge, the first matching manifest entry. The caller has checked that
    # no `TORCH_C_DLPACK_EXT_*` variable is set.
    with LOCK:
        try:
            tensor = torch.Tensor
            if hasattr(tensor, CAPSULE_ATTR) or hasattr(tensor, LEGACY_INT_ATTR):
                return None
            kind, verified = _matching_library(torch, package_dir)
            if verified is None:
                return None
            loaded = _open(*verified)
        except Exception:  # the full selector meets the same and reports it
            return None
        publish(torch, loaded[2])
        return kind, loaded[0]


def _matching_library(
    torch: ModuleType, package_dir: str
) -> tuple[Literal["load", "portable"], tuple[str, bytes, os.stat_result] | None]:
    # `(kind, verified)`: the manifest entry the selector would load first for this
    # torch, verified as `(path, bytes, stat)`, or None (no valid manifest, no match, a
    # failed check); kind "load" for a native library, "portable" for the portable table.
    # The selector's order: a native library of this torch (the build of the exact
    # running torch first, then by file); where none is listed, the portable library
    # when torch has `torch._C._to_dlpack` (every library's python must serve this
    # interpreter).
    version = torch.__version__
    wanted = torch_minor_of(version) if isinstance(version, str) else None
    entries = _read_manifest(os.path.join(package_dir, _MANIFEST_NAME)) if wanted else None
    if not entries:
        return "load", None
    backend, abi, best, portable = backend_of(torch), cxx11_abi_of(torch), None, None
    running, freethreaded = interpreter()
    for entry in entries:
        # "abi3" serves every CPython with the GIL from 3.9, the oldest this module runs
        # on: the entries of a release's abi3 wheel say it, and cost no call.
        python = entry["python"]
        if (freethreaded or python != _ABI3) and not python_serves(python, running, freethreaded):
            continue
        # Both are True, False or None here: `is` is the selector's equality. No native
        # backend is "any", so the portable entry is never taken for a native one.
        if entry["backend"] == backend and entry["cxx11_abi"] is abi:
            major, minor = entry["torch"].split(".")
            order = (entry["torch_build"] != version, entry["file"])
            if (int(major), int(minor)) == wanted and (best is None or order < best[0]):
                best = order, entry
        elif entry["torch"] == _ANY and (portable is None or entry["file"] < portable["file"]):
            portable = entry
    if best is not None:
        return "load", _read_verified(best[1], package_dir)
    # No native library: the portable table, which calls torch._C._to_dlpack.
    if portable is None or not hasattr(getattr(torch, "_C", None), "_to_dlpack"):
        return "portable", None
    return "portable", _read_verified(portable, package_dir)


def interpreter() -> tuple[tuple[int, int], bool]:
    # `naming.running_python()`: this CPython's `(major, minor)` and whether it is a
    # free-threaded BUILD (never whether the GIL is on now). `sys.abiflags` holds "t" in
    # a free-threaded POSIX build (sysconfig, which the core asks, costs ~1 ms to load
    # its data); Windows has no abiflags and asks sysconfig.
    flags = getattr(sys, "abiflags", None)
    if flags is None:
        import sysconfig

        return sys.version_info[:2], bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    return sys.version_info[:2], "t" in flags


def python_serves(value: str, version: tuple[int, int], freethreaded: bool) -> bool:
    # `naming.python_serves`: may a library whose manifest python is `value` be loaded
    # here ("abi3": GIL CPython >= 3.9; "abi3.12": GIL >= 3.12; "3.14t": free-threaded
    # 3.14 only; "3.11": GIL 3.11 only)? A unit test compares the two on any text.
    if value == _ABI3:
        return not freethreaded and version >= (3, 9)
    if value.startswith("abi3."):
        minor = value[5:]
        if minor.isascii() and minor.isdigit() and len(minor) <= 2 and int(minor) > 9:
            return not freethreaded and version >= (3, int(minor))
        return False
    text = value[:-1] if value.endswith("t") else value
    major, dot, minor = text.partition(".")
    if not (dot and major.isascii() and major.isdigit() and minor.isascii() and minor.isdigit()):
        return False
    target = (int(major), int(minor))
    return len(text) <= 9 and version == target and freethreaded == (text != value)


def _read_regular(
    path: str, limit: int, size: int | None = None, flags: int = 0
) -> tuple[bytes, os.stat_result] | None:
    # The bytes of the regular file `path` (opened without blocking, with `flags`
    # added) and its stat, if it has at most `limit` bytes (exactly `size`, when
    # given) and it did not grow while being read. One read, of one byte more than stat
    # says: a regular file's read returns all it asks for up to the end, so a short
    # read is a file that shrank and a long one a file that grew; either is refused
    # (the full path's reader says why).
    try:
        fd = os.open(path, _OPEN_FLAGS | flags)
    except (OSError, ValueError):
        return None
    try:
        info = os.fstat(fd)
        expected = info.st_size
        if not stat.S_ISREG(info.st_mode) or expected > limit or size not in (None, expected):
            return None
        data = os.read(fd, expected + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return (data, info) if len(data) == expected else None


def _read_manifest(path: str) -> list[Entry] | None:
    # The entries of a manifest that passes every check of
    # `_torch_c_dlpack_ext_core.manifest.load_manifest`, as JSON objects; None for any
    # manifest it would refuse (it then says why).
    read = _read_regular(path, _MAX_MANIFEST_BYTES)
    try:
        data = json.loads(read[0].decode("utf-8")) if read and read[0].strip() else None
    except (ValueError, RecursionError):  # not UTF-8, not JSON, too deep
        return None
    if not isinstance(data, dict) or type(data.get("schema")) is not int:
        return None
    entries = data.get("libraries") if data["schema"] == _SCHEMA_VERSION else None
    if not isinstance(entries, list) or len(entries) > _MAX_ENTRIES:
        return None
    try:
        return entries if not entries or _valid_entries(entries) else None
    except TypeError:  # a field of a type no check expects (a list where text belongs)
        return None


def _valid_entries(entries: list[object]) -> bool:
    # Whether `ManifestEntry.from_json` accepts every entry (a non-empty list): the
    # same checks, made column by column over all the entries at once (a release's
    # combined wheel lists twenty, and every one is checked on every import), each a C
    # call, on each column's distinct values (most repeat from entry to entry): a set
    # refuses an unhashable value and `"".join` anything but text (TypeError, which the
    # caller catches), one `isprintable` sees every character (so "\0" can separate
    # texts below), `min` and `max` of the lengths bound each field, a set of types or
    # of values says what a column holds. JSON objects come only as dicts, and a
    # missing field is a KeyError.
    if {*map(type, entries)} != {dict}:
        return False
    try:
        columns = [*zip(*map(_entry_values, cast("list[dict[str, object]]", entries)))]
    except KeyError:
        return False
    # Text as distinct values (a set: no text equals anything but text); cxx11_abi and
    # size as they are (in a set, 1, 1.0 and True would be one value).
    torch, python, gpu, file, backend, sha = map(set, (*columns[:1], *columns[5:9], columns[11]))
    abi, size = columns[9:11]
    texts = set().union(*columns[:6], gpu - {None})  # gpu_toolkit may be null
    # An "any" in torch, torch_build or backend only in an entry that is torch-agnostic
    # in all five fields (then torch's "any" is the only text of that column not a
    # number): each of the three columns holds "any" exactly as often as there are such
    # entries. Counted in C: the portable entry costs the native path no loop of ours.
    agnostic = [*zip(columns[0], columns[1], columns[8], columns[9], columns[6])].count(_AGNOSTIC)
    # The torch 'major.minor' and the Python ('abi3', 'abi3.12', '3.11', '3.14t') as
    # numbers: exactly one dot each, between two runs of 1-6 ASCII digits.
    numbers = (torch - {_ANY}) | {
        text[3:] if text.startswith("abi3.") else text.removesuffix("t")
        for text in python - {_ABI3}
        if type(text) is str
    }
    files = "/".join(file)
    if not ("".join(texts).isprintable() and files.isprintable()):
        return False
    # (A manifest of portable abi3 libraries only has no number to check.)
    digits = "\0".join(numbers).replace(".", "\0").split("\0") if numbers else ["0"]
    parts = files.split("/")
    return (
        columns[0].count(_ANY) == columns[1].count(_ANY) == columns[8].count(_ANY) == agnostic
        and min(map(len, texts)) > 0
        and max(map(len, texts)) <= _MAX_TEXT
        and {text.count(".") for text in numbers} <= {1}
        and min(map(len, digits)) > 0
        and max(map(len, digits)) <= 6
        and "".join(digits).isascii()
        and "".join(digits).isdigit()
        and min(map(len, file)) > 0
        and max(map(len, file)) <= _MAX_FILE_PATH
        and "\\" not in files
        and ":" not in files
        and "" not in parts
        and "." not in parts
        and ".." not in parts
        and max(map(len, parts)) <= 255
        and backend <= _BACKEND_SET
        and {*map(type, abi)} <= _ABI_TYPES
        and {*map(type, size)} == {int}
        and min(size) > 0
        and max(size) <= MAX_LIBRARY_BYTES
        and {*map(type, sha)} == {str}
        and {*map(len, sha)} == {64}
        and not "".join(sha).strip(_HEX)
    )


def _read_verified(entry: Entry, package_dir: str) -> tuple[str, bytes, os.stat_result] | None:
    # `(path, bytes, stat)` of the entry's library if `manifest.read_verified` would
    # return them: a regular file inside the package of exactly the recorded size and
    # sha256. Inside is proven without resolving the path (realpath costs a system call
    # per component of where the package is installed): no directory between the package
    # and the file, nor the file itself, may be a symbolic link. A link that stays inside
    # the package, which the core accepts, goes to the full selector.
    parts = entry["file"].split("/")
    path = package_dir
    try:
        for part in parts[:-1]:
            path = os.path.join(path, part)
            if not stat.S_ISDIR(os.lstat(path).st_mode):
                return None
        path = os.path.join(path, parts[-1])
        # No O_NOFOLLOW (Windows): the last component is looked at first.
        if not _NOFOLLOW and stat.S_ISLNK(os.lstat(path).st_mode):
            return None
    except (OSError, ValueError):
        return None
    read = _read_regular(path, entry["size"], entry["size"], _NOFOLLOW)
    if read is None:
        return None
    # usedforsecurity=False: the digest that `import hashlib` already fetched from
    # OpenSSL (fetching the other costs ~18 us on first use); the sha256 finds a damaged
    # or replaced file, and whoever could forge a file could rewrite the manifest too.
    if hashlib.sha256(read[0], usedforsecurity=False).hexdigest() != entry["sha256"]:
        return None
    return path, read[0], read[1]


# Loading one library (both paths).


def elf_problem(data: bytes | memoryview) -> str | None:
    # Why an ELF image's headers point past its end, or None. dlopen maps every loadable
    # segment; touching a page beyond the end of a truncated file raises SIGBUS, which
    # kills the process (no `except` helps). A manifest checksum cannot catch a file that
    # was truncated before it was hashed, so the extents are checked too. Non-ELF data is
    # left to dlopen, which rejects it with an ordinary error. `_library.check_elf_image`
    # raises with the problem.
    size = len(data)
    if size < 16 or bytes(data[:4]) != b"\x7fELF":
        return None
    is64, order = data[4] == 2, "<" if data[5] == 1 else ">"
    header = struct.Struct(order + ("HHIQQQIHHHHHH" if is64 else "HHIIIIIHHHHHH"))
    if size < 16 + header.size:
        return "truncated ELF header"
    fields = header.unpack_from(data, 16)
    phoff, shoff, phentsize, phnum, shentsize, shnum = fields[4:6] + fields[8:12]
    if phoff + phnum * phentsize > size or (shoff and shoff + shnum * shentsize > size):
        return f"truncated ({size} bytes, its ELF headers describe more)"
    segment = struct.Struct(order + ("IIQQQQQQ" if is64 else "IIIIIIII"))
    for index in range(phnum):
        start = phoff + index * phentsize
        if start + segment.size > size:
            return "truncated ELF program headers"
        values = segment.unpack_from(data, start)
        end = values[2] + values[5] if is64 else values[1] + values[4]
        if values[0] == 1 and end > size:  # PT_LOAD
            return f"truncated: a loadable segment ends at byte {end}, the file has {size}"
    return None


# Descriptors of the private copies dlopen loaded, kept open for the life of the
# process: the number stays ours, so `/proc/self/fd/N` names only our library.
_PRIVATE_COPIES: list[int] = []


def private_copy(path: str, data: bytes) -> str | None:
    # A sealed in-memory copy of `data` for dlopen (`/proc/self/fd/N` of a memfd named
    # after `path`), or `None` where there is no memfd (not Linux). Where /proc is not
    # mounted, dlopen of that name fails and the full path loads the file itself, once
    # it has read it again and found the bytes unchanged (`_library.open_library`).
    #
    # Loading a private copy makes the bytes loaded exactly the bytes verified: a file
    # swapped after the check, or truncated in place during (or after) dlopen, cannot reach
    # the process (a truncated mapping would be a SIGBUS).
    create = getattr(os, "memfd_create", None)
    if create is None:
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
    raw = getattr(_ctypes, "dlopen", None)
    if raw is None:
        return ctypes.CDLL(target, mode=_DLOPEN_MODE)
    handle: int = raw(target, _DLOPEN_MODE)
    return handle


def export(handle: int | ctypes.CDLL, name: str, restype: type[_CDataType]) -> CFuncPtr | None:
    # The library's export `name`, a function of no argument returning `restype`, ready
    # to call; `None` if the library lacks it. A dlopen handle's export is called
    # through an instance of a class ctypes already has (no prototype class to create):
    # a call that keeps the GIL, which the exports, returning static data, need no
    # release of.
    try:
        if isinstance(handle, int):
            func = ctypes.pythonapi._FuncPtr(_ctypes.dlsym(handle, name))
        else:
            func = getattr(handle, name)
    except (OSError, AttributeError):
        return None
    func.restype = restype
    func.argtypes = ()
    return func


def table_pointer(handle: int | ctypes.CDLL) -> int | None:
    # What the library's `TorchDLPackExchangeAPIPtr()` returns; `None` if it lacks
    # the export.
    func = export(handle, EXPORT_TABLE, ctypes.c_int64)
    return None if func is None else int(func())


def _open(path: str, data: bytes, info: os.stat_result) -> Record:
    # `_library.open_library` for bytes verified on the common path, whose stat is known;
    # raises (for the full path to redo the step and say why) where a check fails.
    key = (info.st_dev, info.st_ino)
    record = LIBRARIES.get(key)
    if record is not None:
        return record
    if elf_problem(data) is not None:
        raise OSError(path)
    handle = dlopen(private_copy(path, data) or path)
    pointer = table_pointer(handle)
    if pointer is None:
        raise OSError(path)
    record = (path, handle, pointer, check_table(pointer, path))
    LIBRARIES[key] = record
    OWN_TABLES.add(pointer)
    return record


def publish(torch: ModuleType, pointer: int) -> None:
    # Set the capsule and the legacy int attribute on `torch.Tensor`.
    capsule = make_capsule(pointer)
    with LOCK:
        setattr(torch.Tensor, CAPSULE_ATTR, capsule)
        setattr(torch.Tensor, LEGACY_INT_ATTR, pointer)
