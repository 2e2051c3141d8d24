"""Loading a library off the import's common path (:func:`open_library`, the selector's
load: it reads the file when no verified bytes are given, loads the file itself where a
memory file may not be mapped executable or ``/proc`` is not mounted, and quotes a library's
``TorchCDLPackExtLoadProblem()`` when its table export returns NULL), the loaded libraries
as objects (:class:`LoadedLibrary`, :func:`loaded_library`), and the load steps' messages
(:func:`load_error`, :func:`check_elf_image`, :func:`short_path`).

:func:`open_library` is the selector's load (a ``LIBRARY`` override, a manifest entry
the common path left to it, a JIT build): the same steps as :mod:`._loader`'s common path
(ELF extents, a sealed private copy, ``RTLD_NOW``, the table check), plus reading the
file itself when no verified bytes are given and loading the file directly where a
memory file may not be mapped executable. :class:`LoadedLibrary` is the view of one
loaded library (:data:`._loader.LIBRARIES` keeps each as a plain record, so the common
path creates no object of a class of ours).
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import TYPE_CHECKING

from ._loader import (
    EXPORT_BUILD_INFO,
    EXPORT_TABLE,
    LIBRARIES,
    LOCK,
    MAX_LIBRARY_BYTES,
    OWN_TABLES,
    check_table,
    dlopen,
    elf_problem,
    export,
    private_copy,
    table_pointer,
)

if TYPE_CHECKING:
    from _torch_c_dlpack_ext_core.trust import TrustedOwners

__all__ = [
    "LoadedLibrary",
    "check_elf_image",
    "load_error",
    "loaded_library",
    "open_library",
    "read_library",
    "short_path",
]


def short_path(path: Path | str) -> str:
    """A path for messages: whole when reasonable, else its start and its end."""
    text = str(path)
    return text if len(text) <= 160 else f"{text[:60]}...{text[-60:]} ({len(text)} characters)"


def load_error(message: str, remedy: str = "") -> Exception:
    """A :class:`~_torch_c_dlpack_ext_core.errors.LibraryLoadError`."""
    from _torch_c_dlpack_ext_core.errors import LibraryLoadError

    return LibraryLoadError(message, remedy)


def check_elf_image(data: bytes | memoryview, path: Path | str) -> None:
    """Refuse an ELF image whose headers point past its end (:func:`._loader.elf_problem`
    says why; ``path`` names it in the error). The error names no remedy, as none of
    :func:`open_library`'s do: its caller knows where the file came from (a bundled
    library, a JIT build, a ``LIBRARY`` override) and names the fix for that."""
    problem = elf_problem(data)
    if problem is not None:
        raise load_error(f"{short_path(path)}: {problem}")


class LoadedLibrary:
    """A library whose exchange table passed :func:`._loader.check_table`."""

    __slots__ = ("_handle", "dlpack_version", "path", "pointer")

    def __init__(
        self, path: Path, handle: int | ctypes.CDLL, pointer: int, dlpack_version: tuple[int, int]
    ) -> None:
        self.path = path
        self._handle = handle
        self.pointer = pointer
        self.dlpack_version = dlpack_version

    def __repr__(self) -> str:
        return f"LoadedLibrary(path={self.path!r}, pointer={self.pointer:#x})"

    @property
    def handle(self) -> ctypes.CDLL:
        """The library as a :class:`ctypes.CDLL` (made on first use from the dlopen handle)."""
        if not isinstance(self._handle, ctypes.CDLL):
            self._handle = ctypes.CDLL(str(self.path), handle=self._handle)
        return self._handle

    def build_info(self) -> str | None:
        """The library's ``TorchCDLPackExtBuildInfo`` JSON, or ``None`` if it lacks it."""
        return _export_text(self.handle, EXPORT_BUILD_INFO)


# One view per loaded library, so that loading or looking up the same file twice gives
# the same object.
_VIEWS: dict[tuple[int, int], LoadedLibrary] = {}


def _view(key: tuple[int, int]) -> LoadedLibrary | None:
    view = _VIEWS.get(key)
    if view is None and key in LIBRARIES:
        path, handle, pointer, version = LIBRARIES[key]
        view = _VIEWS.setdefault(key, LoadedLibrary(Path(path), handle, pointer, version))
    return view


def _identity(path: Path | str) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    return info.st_dev, info.st_ino


def loaded_library(path: Path | str) -> LoadedLibrary | None:
    """The library this process opened from ``path`` (the same file), if any."""
    key = _identity(path)
    with LOCK:
        return None if key is None else _view(key)


def read_library(path: Path, owners: TrustedOwners | None = None) -> bytes:
    """The bytes of ``path``, read once from one descriptor opened without blocking
    (a FIFO or device put in its place is refused, never waited on). ``owners``: the file
    and every directory above it must be theirs alone (:mod:`_torch_c_dlpack_ext_core.trust`;
    a ``LIBRARY`` override), else the refusal is raised as a load error."""
    from _torch_c_dlpack_ext_core.errors import ManifestError, UntrustedPathError
    from _torch_c_dlpack_ext_core.files import open_regular, read_fd

    name = short_path(path)
    try:
        fd, info = open_regular(path, name, owners=owners)
    except ManifestError as exc:
        raise load_error(f"cannot be loaded: {exc.cause}") from None
    except UntrustedPathError as exc:
        raise load_error(str(exc)) from None
    try:
        if info.st_size > MAX_LIBRARY_BYTES:
            raise load_error(f"{name}: {info.st_size} bytes, too large for a library")
        return read_fd(fd, MAX_LIBRARY_BYTES)
    except OSError as exc:
        raise load_error(f"{name}: cannot be read ({exc.strerror})") from None
    finally:
        os.close(fd)


def _first_line(exc: BaseException, limit: int = 300) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    return line if len(line) <= limit else line[:limit] + "..."


def _dlopen_verified(target: str, name: str, path: Path, data: bytes) -> int | ctypes.CDLL:
    """dlopen ``target`` (the private copy, or ``name`` itself); raises OSError.

    Some systems refuse to map a memory file executable (``vm.memfd_noexec``, an SELinux
    execmem policy): there the file itself is loaded instead, if it still holds exactly
    the verified bytes (a library that fails for its own reasons, such as an undefined
    symbol, fails the same way again and reports that).
    """
    try:
        return dlopen(target)
    except OSError:
        if target == name:
            raise
        try:
            unchanged = read_library(path) == data
        except Exception:  # LibraryLoadError: the file is gone or changed
            unchanged = False
        if not unchanged:
            raise
    return dlopen(name)


#: The export saying why the table export returned NULL (CONTRIBUTING.md, "Build contract").
EXPORT_LOAD_PROBLEM = "TorchCDLPackExtLoadProblem"


def _export_text(handle: int | ctypes.CDLL, name: str) -> str | None:
    """What the library's export ``name`` (a ``const char*`` of no argument) returns, as
    text; ``None`` where the library lacks it or it returns NULL."""
    func = export(handle, name, ctypes.c_char_p)
    raw = func() if func is not None else None
    return raw.decode("utf-8", "replace") if raw else None


def open_library(path: Path, data: bytes | None = None) -> LoadedLibrary:
    """dlopen ``path`` (once per process) and check its exchange table.

    ``data``: the file's bytes as verified by the caller (the manifest's size and
    sha256); without it the file is read here, once. Those bytes are ELF-checked and
    loaded from a private copy (:func:`._loader.private_copy`), so nothing that happens to
    ``path`` meanwhile is loaded; where no private copy can be made the path itself is
    loaded. Raises :class:`~_torch_c_dlpack_ext_core.errors.LibraryLoadError` carrying the
    loader's message (for example the undefined symbol of a library built for the other
    C++ ABI).
    """
    with LOCK:
        loaded = loaded_library(path)
        if loaded is not None:
            return loaded
        if data is None:
            data = read_library(path)
        check_elf_image(data, path)
        name = str(path)
        # Without /proc the private copy has no name dlopen can open: the file it is.
        target = (os.path.isdir("/proc/self/fd") and private_copy(name, data)) or name
        try:
            handle = _dlopen_verified(target, name, path, data)
        except OSError as exc:
            cause = _first_line(exc).replace(target, name)
            raise load_error(f"{short_path(path)}: cannot be loaded: {cause}") from None
        pointer = table_pointer(handle)
        if pointer is None:
            raise load_error(
                f"{short_path(path)}: does not export {EXPORT_TABLE} (not a torch-c-dlpack-ext "
                "library)"
            )
        if pointer == 0:
            # Why, in its own words (None: an older build, a library of someone else's).
            problem = _export_text(handle, EXPORT_LOAD_PROBLEM)
            if problem:
                raise load_error(f"{short_path(path)}: cannot be used: {problem}")
        version = check_table(pointer, short_path(path))
        OWN_TABLES.add(pointer)
        loaded = LoadedLibrary(path=path, handle=handle, pointer=pointer, dlpack_version=version)
        key = _identity(path)
        if key is not None:
            LIBRARIES[key] = (name, handle, pointer, version)
            _VIEWS[key] = loaded
        return loaded
