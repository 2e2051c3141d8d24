"""Loading a library off the import's common path (:func:`open_library`, the selector's
load: it reads the file when no verified bytes are given, loads the file itself where a
memory file may not be mapped executable or ``/proc`` is not mounted, and quotes a library's
``TorchCDLPackExtLoadProblem()`` when its table export returns NULL), the loaded libraries
as objects (:class:`LoadedLibrary`, :func:`loaded_library`), the load steps' messages
(:func:`load_error`, :func:`check_elf_image`, :func:`short_path`), and what a library's
build info says it serves (:func:`build_info_in`, read from its bytes before dlopen;
:func:`override_mismatch`, why a ``LIBRARY`` override must not be published here).

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
import re
from pathlib import Path
from typing import TYPE_CHECKING

from _torch_c_dlpack_ext_core.errors import TorchCDLPackExtError
from _torch_c_dlpack_ext_core.naming import (
    PORTABLE,
    Backend,
    env_var,
    python_serves,
    running_python,
)

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
from ._model import Settings, TorchInfo

if TYPE_CHECKING:
    from _torch_c_dlpack_ext_core.trust import TrustedOwners

__all__ = [
    "LoadedLibrary",
    "build_info_in",
    "build_mismatch",
    "check_elf_image",
    "load_error",
    "loaded_library",
    "open_library",
    "override_mismatch",
    "parse_build_info",
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


def override_mismatch(
    loaded: LoadedLibrary, info: TorchInfo, settings: Settings
) -> tuple[str, str] | None:
    """Why a ``TORCH_C_DLPACK_EXT_LIBRARY`` library must not be published on this torch
    (reason, remedy), from its ``TorchCDLPackExtBuildInfo``; ``None`` if it may.

    The manifest's checks, done on what the library says it is: another torch minor is
    always refused (``THPVariable``'s layout and ATen's ABI differ between minors, so
    the first call could crash); another Python ABI (``"python"``: ``abi3`` on a
    free-threaded CPython, ``3.13t`` on 3.13 with the GIL, another version: the
    interpreter's is its build's, ``Py_GIL_DISABLED``), which can crash at dlopen; another
    C++ ABI too; another backend than the one this
    torch needs (the CPU library on a GPU torch would answer ``current_work_stream``
    without torch's stream) unless ``TORCH_C_DLPACK_EXT_BACKEND`` asks for exactly it.
    A library that does not say its backend is refused on a GPU torch for that reason.
    """
    return build_mismatch(parse_build_info(loaded.build_info()), loaded.path, info, settings)


#: How ``TorchCDLPackExtBuildInfo``'s JSON (csrc/build_info.cc) stands in the file: a
#: NUL-terminated string constant that begins with the torch build.
_BUILD_INFO_IN_FILE = re.compile(
    rb'\{(?:"table": "[a-z]{1,20}", )?"torch": "[^"\x00]{1,200}", "torch_major": '
    rb"[^\x00]{1,2000}?\}\x00"
)


def build_info_in(data: bytes) -> dict[str, object]:
    """The build info a library's bytes hold (its ``TorchCDLPackExtBuildInfo`` string
    constant), read without loading it; ``{}`` when there is none."""
    match = _BUILD_INFO_IN_FILE.search(data)
    return parse_build_info(match.group()[:-1].decode("utf-8", "replace") if match else None)


def parse_build_info(raw: str | None) -> dict[str, object]:
    import json

    try:
        described = json.loads(raw) if raw else None
    except (ValueError, RecursionError):
        described = None
    return described if isinstance(described, dict) else {}


def build_mismatch(
    built: dict[str, object], path: Path, info: TorchInfo, settings: Settings
) -> tuple[str, str] | None:
    """:func:`override_mismatch` on a build info already read (``{}``: nothing known)."""
    var = env_var("LIBRARY")
    name = short_path(path)
    fix = (
        f"point {var} at a library built for this torch, set {env_var('JIT')}=1 instead, "
        "or unset it"
    )
    python_or_portable = _python_mismatch(built, name, info)
    if python_or_portable is not None or built.get("table") == PORTABLE:
        # The portable table is torch-agnostic: no torch minor, ABI or backend to match.
        return python_or_portable
    major, minor = built.get("torch_major"), built.get("torch_minor")
    if isinstance(major, int) and isinstance(minor, int):
        try:
            running = info.major_minor
        except TorchCDLPackExtError:
            running = None
        if running is not None and (major, minor) != running:
            return (
                f"{name} (from {var}) was built for torch {major}.{minor}, this is torch "
                f"{info.version}: a library works only with the torch minor it was built for",
                fix,
            )
    abi = built.get("cxx11_abi")
    if (
        isinstance(abi, int)
        and not isinstance(abi, bool)
        and info.cxx11_abi is not None
        and bool(abi) != info.cxx11_abi
    ):
        return (
            f"{name} (from {var}) was built for the cxx11 ABI {abi}, this torch uses "
            f"{int(info.cxx11_abi)}",
            fix,
        )
    wanted = settings.backend or info.backend
    backend = built.get("backend")
    if backend != wanted.value and (backend is not None or wanted is not Backend.CPU):
        known = isinstance(backend, str) and backend in {b.value for b in Backend}
        said = f"the {backend} backend" if known else "an unknown backend"
        asked = (
            f"{env_var('BACKEND')} asks for {wanted.value}"
            if settings.backend is not None
            else f"this torch needs {wanted.value}"
            + (
                " (a GPU torch gets a library that answers its streams)"
                if wanted is not Backend.CPU
                else ""
            )
        )
        return (
            f"{name} (from {var}) was built for {said}, {asked}",
            f"point {var} at a {wanted.value} library"
            + (f", set {env_var('BACKEND')}={backend} to use it anyway" if known else "")
            + ", or unset it",
        )
    return None


def _python_mismatch(
    built: dict[str, object], name: str, info: TorchInfo
) -> tuple[str, str] | None:
    """Why a library whose build info is ``built`` may not be loaded by this interpreter
    (its ``python``: an abi3 library on a free-threaded build, a 3.14t one elsewhere), or,
    for the portable table, by this torch (it calls ``torch._C._to_dlpack``)."""
    var = env_var("LIBRARY")
    python = built.get("python")
    version_info, freethreaded = info.python or running_python()
    if isinstance(python, str) and not python_serves(python, version_info, freethreaded):
        build = "a free-threaded" if freethreaded else "a GIL"
        return (
            f"{name} (from {var}) was built for Python {python}, this is {build} CPython "
            f"{version_info[0]}.{version_info[1]}: its objects' layout would not match, and "
            "loading it could crash the process",
            f"point {var} at a library built for this Python, set {env_var('JIT')}=1 to "
            "build one for it, or unset it",
        )
    if built.get("table") == PORTABLE and not info.has_to_dlpack:
        return (
            f"{name} is the portable table, which calls torch._C._to_dlpack; torch "
            f"{info.version} has none",
            f"unset {var}",
        )
    return None
