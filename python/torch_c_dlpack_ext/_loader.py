"""The import's common path, and the steps every load takes: verify, dlopen, check the
table, publish on ``torch.Tensor``.

:func:`load_common` handles the common case with this module and :mod:`._capsule`
alone: no ``TORCH_C_DLPACK_EXT_*`` variable, neither attribute on
``torch.Tensor``, a valid manifest and a matching library that loads. Anything else (and
any failure on the way) returns ``None`` before anything changed, and the package's
``__init__`` runs :mod:`._selector`, the full selector, which decides with
:func:`._select.decide`, acts, and says why in one warning; it is imported only then.
Fewer modules beat smaller ones here (each costs a file lookup and an unmarshal on every
``import tvm_ffi``), so this module restates the manifest schema's checks and bounds and
the torch version's reading, as plain functions over the JSON; unit tests pin them to
the core's (``manifest.py``, ``naming.torch_minor``): the common path accepts only what
the core accepts, and the core's messages explain everything else.

Every check of the full path is kept: the manifest schema, the library's size and
sha256, its ELF extents, a sealed in-memory copy for dlopen (``RTLD_NOW |
RTLD_LOCAL``), the table check. Attributes are set only after the table passed every
check, so a consumer never sees a half-valid API.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import stat
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._capsule import (
    CAPSULE_ATTR,
    ENV_PREFIX,
    EXPORT_BUILD_INFO,
    EXPORT_TABLE,
    LEGACY_INT_ATTR,
    OWN_TABLES,
    backend_of,
    check_table,
    cxx11_abi_of,
    make_capsule,
    torch_minor_of,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ._status import StatusFields

__all__ = [
    "LOCK",
    "MAX_LIBRARY_BYTES",
    "LoadedLibrary",
    "check_elf_extent",
    "load_common",
    "loaded_library",
    "make_capsule",
    "open_library",
    "publish",
    "read_library",
]

#: Serialises loading and publishing (imports from threads, build_for_current_torch).
LOCK = threading.RLock()
# Loaded libraries stay referenced for the life of the process: the published
# pointer points into them, so they must never be unloaded.
_LIBRARIES: dict[str, LoadedLibrary] = {}

# The manifest schema's bounds and fields (``_torch_c_dlpack_ext_core.manifest``; a unit
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
_TEXT_FIELDS = ("torch", "torch_build", "dlpack", "toolchain", "gpu_toolkit", "platform", "python")
_HEX = frozenset("0123456789abcdef")
#: ``O_NONBLOCK``: a FIFO planted where a file should be must not block the import.
_OPEN_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)


class LoadedLibrary:
    """A library whose exchange table passed :func:`._capsule.check_table`."""

    __slots__ = ("dlpack_version", "handle", "path", "pointer")

    def __init__(
        self, path: Path, handle: ctypes.CDLL, pointer: int, dlpack_version: tuple[int, int]
    ) -> None:
        self.path = path
        self.handle = handle
        self.pointer = pointer
        self.dlpack_version = dlpack_version

    def __repr__(self) -> str:
        return f"LoadedLibrary(path={self.path!r}, pointer={self.pointer:#x})"

    def build_info(self) -> str | None:
        """The library's ``TorchCDLPackExtBuildInfo`` JSON, or ``None`` if it lacks it."""
        try:
            func = getattr(self.handle, EXPORT_BUILD_INFO)
        except AttributeError:
            return None
        func.restype = ctypes.c_char_p
        func.argtypes = []
        raw = func()
        return raw.decode("utf-8", "replace") if raw else None


# --------------------------------------------------------------------------------------
# The common path.
# --------------------------------------------------------------------------------------


def load_common(environ: Mapping[str, str], package_dir: Path) -> StatusFields | None:
    """Publish the bundled library matching the running torch, when nothing is unusual;
    ``None`` otherwise (before anything was changed), for the full selector to decide,
    act and explain. The same decision the selector would make (a unit test compares
    them): no override, no attribute to judge, the first matching manifest entry."""
    if any(name.startswith(ENV_PREFIX) for name in environ):
        return None
    with LOCK:
        return _load_common(package_dir)


def _load_common(package_dir: Path) -> StatusFields | None:
    try:
        import torch

        tensor = torch.Tensor
        if hasattr(tensor, CAPSULE_ATTR) or hasattr(tensor, LEGACY_INT_ATTR):
            return None
        verified = _matching_library(torch, package_dir)
        loaded = open_library(*verified) if verified is not None else None
    except Exception:  # the full selector meets the same and reports it
        return None
    if loaded is None:
        return None
    publish(torch, loaded.pointer)
    return {"kind": "load", "library": loaded.path, "common_path": True}


def _matching_library(torch: Any, package_dir: Path) -> tuple[Path, bytes] | None:
    """``(path, verified bytes)`` of the manifest entry the selector would load first for
    this torch, or ``None`` (no valid manifest, no match, a library that fails its check)."""
    version = torch.__version__
    wanted = torch_minor_of(version) if isinstance(version, str) else None
    entries = _read_manifest(package_dir / _MANIFEST_NAME) if wanted is not None else None
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


def _read_regular(path: Path, limit: int, size: int | None = None) -> bytes | None:
    """The bytes of the regular file ``path`` (opened without blocking), if it has at most
    ``limit`` bytes (exactly ``size``, when given) and none were added while reading."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except (OSError, ValueError):
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        if size is not None and info.st_size != size:
            return None
        data = read_fd(fd, limit + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data if len(data) <= limit and (size is None or len(data) == size) else None


def read_fd(fd: int, limit: int) -> bytes:
    """Up to ``limit`` bytes of an open file, from its current offset."""
    chunks: list[bytes] = []
    total = 0
    while total < limit and (chunk := os.read(fd, min(1 << 20, limit - total))):
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def _read_manifest(path: Path) -> list[dict[str, Any]] | None:
    """The entries of a manifest that passes every check of
    ``_torch_c_dlpack_ext_core.manifest.load_manifest``, as JSON objects; ``None`` for
    any manifest it would refuse (it then says why)."""
    raw = _read_regular(path, _MAX_MANIFEST_BYTES)
    if raw is None or not raw.strip():
        return None
    try:
        data = json.loads(raw.decode("utf-8"))
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


def _is_text(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= _MAX_TEXT and value.isprintable()


def _valid_file(file: Any) -> bool:
    return (
        isinstance(file, str)
        and bool(file)
        and len(file) <= _MAX_FILE_PATH
        and file.isprintable()
        and "\\" not in file
        and ":" not in file
        and all(part not in ("", ".", "..") and len(part) <= 255 for part in file.split("/"))
    )


def _valid_entry(entry: dict[str, Any]) -> bool:
    """Whether ``ManifestEntry.from_json`` accepts ``entry`` (the same checks)."""
    if any(name not in entry for name in _FIELDS):
        return False
    abi, size, sha = entry["cxx11_abi"], entry["size"], entry["sha256"]
    if not (
        _valid_file(entry["file"])
        and isinstance(entry["backend"], str)
        and entry["backend"] in _BACKENDS
        and (abi is None or isinstance(abi, bool))
        and type(size) is int
        and 0 < size <= MAX_LIBRARY_BYTES
        and isinstance(sha, str)
        and len(sha) == 64
        and all(c in _HEX for c in sha)
        and all(
            _is_text(entry[name]) or (name == "gpu_toolkit" and entry[name] is None)
            for name in _TEXT_FIELDS
        )
    ):
        return False
    major, dot, minor = entry["torch"].partition(".")
    python = entry["python"]
    py_major, py_dot, py_minor = python.removesuffix("t").partition(".")
    return bool(dot and _is_number(major) and _is_number(minor)) and (
        python == "abi3" or bool(py_dot and _is_number(py_major) and _is_number(py_minor))
    )


def _read_verified(entry: dict[str, Any], package_dir: Path) -> tuple[Path, bytes] | None:
    """``(path, bytes)`` of the entry's library if ``manifest.read_verified`` would return
    them: a regular file inside the package of exactly the recorded size and sha256."""
    path = package_dir / entry["file"]
    real, root = os.path.realpath(path), os.path.realpath(package_dir)
    if os.path.commonpath([real, root]) != root:
        return None
    data = _read_regular(path, entry["size"], entry["size"])
    if data is None or hashlib.sha256(data).hexdigest() != entry["sha256"]:
        return None
    return path, data


# --------------------------------------------------------------------------------------
# Loading one library (both paths).
# --------------------------------------------------------------------------------------


def _load_error(message: str, remedy: str = "") -> Exception:
    from _torch_c_dlpack_ext_core.errors import LibraryLoadError

    return LibraryLoadError(message, remedy)


def _reinstall() -> str:
    from _torch_c_dlpack_ext_core.errors import REINSTALL

    return REINSTALL


def short_path(path: Path) -> str:
    """A path for messages: whole when reasonable, else its start and its end."""
    text = str(path)
    return text if len(text) <= 160 else f"{text[:60]}...{text[-60:]} ({len(text)} characters)"


_ELF_MAGIC = b"\x7fELF"
_PT_LOAD = 1


def check_elf_extent(path: Path, data: bytes | None = None) -> None:
    """Refuse an ELF file whose headers point past its end.

    dlopen maps every loadable segment; touching a page beyond the end of a
    truncated file raises SIGBUS, which kills the process (no ``except`` helps).
    A manifest checksum cannot catch a file that was truncated before it was
    hashed, so the extents are checked here too. ``data``: the file's bytes, already
    read (then ``path`` only names it). Non-ELF files are left to dlopen, which
    rejects them with an ordinary error.
    """
    name = short_path(path)
    try:
        if data is None:
            with path.open("rb") as handle:
                data = handle.read()
    except OSError:
        return  # unreadable: dlopen reports it with the loader's own words
    _check_elf_image(memoryview(data), name)


def _check_elf_image(data: memoryview, name: str) -> None:
    import struct

    size = len(data)
    if size < 16 or bytes(data[:4]) != _ELF_MAGIC:
        return
    is64, order = data[4] == 2, "<" if data[5] == 1 else ">"
    header = struct.Struct(order + ("HHIQQQIHHHHHH" if is64 else "HHIIIIIHHHHHH"))
    if size < 16 + header.size:
        raise _load_error(f"{name}: truncated ELF header", _reinstall())
    fields = header.unpack_from(data, 16)
    phoff, shoff = fields[4], fields[5]
    phentsize, phnum, shentsize, shnum = fields[8], fields[9], fields[10], fields[11]
    if phoff + phnum * phentsize > size or (shoff and shoff + shnum * shentsize > size):
        raise _load_error(
            f"{name}: truncated ({size} bytes, its ELF headers describe more)", _reinstall()
        )
    segment = struct.Struct(order + ("IIQQQQQQ" if is64 else "IIIIIIII"))
    for index in range(phnum):
        start = phoff + index * phentsize
        if start + segment.size > size:
            raise _load_error(f"{name}: truncated ELF program headers", _reinstall())
        values = segment.unpack_from(data, start)
        offset, filesz = (values[2], values[5]) if is64 else (values[1], values[4])
        if values[0] == _PT_LOAD and offset + filesz > size:
            raise _load_error(
                f"{name}: truncated: a loadable segment ends at byte {offset + filesz}, "
                f"the file has {size}",
                _reinstall(),
            )


#: Descriptors of the private copies dlopen loaded, kept open for the life of the
#: process: the number stays ours, so ``/proc/self/fd/N`` names only our library.
_PRIVATE_COPIES: list[int] = []


def read_library(path: Path) -> bytes:
    """The bytes of ``path``, read once from one descriptor opened without blocking
    (a FIFO or device put in its place is refused, never waited on)."""
    from _torch_c_dlpack_ext_core.errors import ManifestError
    from _torch_c_dlpack_ext_core.manifest import open_regular

    name = short_path(path)
    try:
        fd, info = open_regular(path, name)
    except ManifestError as exc:
        raise _load_error(f"cannot be loaded: {exc.cause}") from None
    try:
        if info.st_size > MAX_LIBRARY_BYTES:
            raise _load_error(f"{name}: {info.st_size} bytes, too large for a library")
        return read_fd(fd, MAX_LIBRARY_BYTES)
    except OSError as exc:
        raise _load_error(f"{name}: cannot be read ({exc.strerror})") from None
    finally:
        os.close(fd)


def _private_copy(path: Path, data: bytes) -> str | None:
    """A sealed in-memory copy of ``data`` for dlopen (``/proc/self/fd/N`` of a memfd),
    or ``None`` where that is unavailable (not Linux, no memfd, no /proc).

    Loading a private copy makes the bytes loaded exactly the bytes verified: a file
    swapped after the check, or truncated in place during (or after) dlopen, cannot
    reach the process (a truncated mapping would be a SIGBUS).
    """
    create = getattr(os, "memfd_create", None)
    if create is None or not os.path.isdir("/proc/self/fd"):
        return None
    flags = getattr(os, "MFD_CLOEXEC", 1) | getattr(os, "MFD_ALLOW_SEALING", 2)
    try:
        fd = create(path.name[:200] or "library", flags)
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


#: RTLD_NOW: every symbol is bound at dlopen, so a library that needs one torch lacks
#: fails here (with the symbol's name) instead of at its first call. RTLD_LOCAL: it
#: resolves torch's symbols from the libraries ``import torch`` loaded and exports
#: nothing to others.
_DLOPEN_MODE = getattr(os, "RTLD_NOW", 2) | ctypes.RTLD_LOCAL


def _dlopen(target: str, key: str, path: Path, data: bytes) -> ctypes.CDLL:
    """dlopen ``target`` (the private copy, or ``key`` itself); raises OSError.

    Some systems refuse to map a memory file executable (``vm.memfd_noexec``, an
    SELinux execmem policy): there the file itself is loaded instead, if it still
    holds exactly the verified bytes (a library that fails for its own reasons, such
    as an undefined symbol, fails the same way again and reports that).
    """
    try:
        return ctypes.CDLL(target, mode=_DLOPEN_MODE)
    except OSError:
        if target == key:
            raise
        try:
            unchanged = read_library(path) == data
        except Exception:  # LibraryLoadError: the file is gone or changed
            unchanged = False
        if not unchanged:
            raise
    return ctypes.CDLL(key, mode=_DLOPEN_MODE)


def _first_line(exc: BaseException, limit: int = 300) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    return line if len(line) <= limit else line[:limit] + "..."


def open_library(path: Path, data: bytes | None = None) -> LoadedLibrary:
    """dlopen ``path`` (once per process) and check its exchange table.

    ``data``: the file's bytes as verified by the caller (the manifest's size and
    sha256); without it the file is read here, once. Those bytes are ELF-checked and
    loaded from a private copy (:func:`_private_copy`), so nothing that happens to
    ``path`` meanwhile is loaded; where no private copy can be made the path itself is
    loaded. Raises :class:`~_torch_c_dlpack_ext_core.errors.LibraryLoadError` carrying
    the loader's message (for example the undefined symbol of a library built for the
    other C++ ABI).
    """
    key = os.path.realpath(path)
    with LOCK:
        if key in _LIBRARIES:
            return _LIBRARIES[key]
        if data is None:
            data = read_library(path)
        check_elf_extent(path, data)
        target = _private_copy(path, data) or key
        try:
            handle = _dlopen(target, key, path, data)
        except OSError as exc:
            cause = _first_line(exc).replace(target, key)
            raise _load_error(f"{short_path(path)}: cannot be loaded: {cause}") from None
        try:
            func = getattr(handle, EXPORT_TABLE)
        except AttributeError:
            raise _load_error(
                f"{short_path(path)}: does not export {EXPORT_TABLE} (not a torch-c-dlpack-ext "
                "library)"
            ) from None
        func.restype = ctypes.c_int64
        func.argtypes = []
        pointer = int(func())
        version = check_table(pointer, short_path(path))
        loaded = LoadedLibrary(path=path, handle=handle, pointer=pointer, dlpack_version=version)
        _LIBRARIES[key] = loaded
        OWN_TABLES.add(pointer)
        return loaded


def loaded_library(path: Path) -> LoadedLibrary | None:
    """The library this process opened from ``path``, if any."""
    with LOCK:
        return _LIBRARIES.get(os.path.realpath(path))


def publish(torch: Any, pointer: int) -> None:
    """Set the capsule and the legacy int attribute on ``torch.Tensor``."""
    capsule = make_capsule(pointer)
    with LOCK:
        setattr(torch.Tensor, CAPSULE_ATTR, capsule)
        setattr(torch.Tensor, LEGACY_INT_ATTR, pointer)
