"""Act on the selector's decision: verify, dlopen, check the table, publish on ``torch.Tensor``.

Nothing here lets an expected failure escape :func:`select_and_load`: every one
becomes the fields of a :class:`._status.Status` with the cause, and one
:class:`TorchCDLPackExtWarning` (the package's ``__init__`` catches the unexpected).
The import keeps those fields; the record itself is made when someone asks for it.
Attributes are set only after a table passed every check, so a consumer never
sees a half-valid API.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from _torch_c_dlpack_ext_core.errors import (
    REINSTALL,
    ConfigError,
    LibraryLoadError,
    ManifestError,
    TorchCDLPackExtError,
    TorchCDLPackExtWarning,
    TorchInstallError,
)
from _torch_c_dlpack_ext_core.manifest import (
    ManifestEntry,
    load_manifest,
    open_regular,
    read_fd,
    read_verified,
)
from _torch_c_dlpack_ext_core.naming import (
    CAPSULE_NAME,
    ENV_PREFIX,
    MANIFEST_NAME,
    Backend,
    env_var,
)

from ._select import (
    Decision,
    DecisionKind,
    Settings,
    decide,
    describe_entry,
    gpu_library_remedy,
    manifest_needed,
)
from ._torchinfo import (
    CAPSULE_ATTR,
    EXPORT_TABLE,
    LEGACY_INT_ATTR,
    OWN_TABLES,
    TorchInfo,
    check_legacy_pointer,
    check_table,
)

if TYPE_CHECKING:
    from ._status import Status

#: The fields of a :class:`._status.Status` (``Status(**fields)`` makes the record).
StatusFields = dict[str, Any]

__all__ = [
    "EXPORT_BUILD_INFO",
    "LoadedLibrary",
    "build_for_current_torch",
    "check_elf_extent",
    "deferred_status",
    "loaded_library",
    "open_library",
    "publish",
    "select_and_load",
]

#: The library's export describing its build (see CONTRIBUTING.md, "Build contract").
EXPORT_BUILD_INFO = "TorchCDLPackExtBuildInfo"

# A private prototype instead of setting argtypes on ctypes.pythonapi.PyCapsule_New,
# which other packages in the same process may configure differently.
_PyCapsule_New = ctypes.PYFUNCTYPE(
    ctypes.py_object, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p
)(("PyCapsule_New", ctypes.pythonapi))
# The capsule stores the name pointer, not a copy: this buffer must outlive every capsule.
_CAPSULE_NAME_BUFFER = ctypes.create_string_buffer(CAPSULE_NAME)

#: Serialises loading and publishing (imports from threads, build_for_current_torch).
LOCK = threading.RLock()
# Loaded libraries stay referenced for the life of the process: the published
# pointer points into them, so they must never be unloaded.
_LIBRARIES: dict[str, LoadedLibrary] = {}


class LoadedLibrary:
    """A library whose exchange table passed :func:`._torchinfo.check_table`."""

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


def _short_path(path: Path) -> str:
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
    import io

    name = _short_path(path)
    try:
        if data is not None:
            _check_elf_image(io.BytesIO(data), len(data), name)
            return
        with path.open("rb") as handle:
            _check_elf_image(handle, os.fstat(handle.fileno()).st_size, name)
    except OSError:
        return  # unreadable: dlopen reports it with the loader's own words


def _check_elf_image(handle: Any, size: int, name: str) -> None:
    import struct

    try:
        ident = handle.read(16)
        if len(ident) < 16 or not ident.startswith(_ELF_MAGIC):
            return
        is64, order = ident[4] == 2, "<" if ident[5] == 1 else ">"
        header_format = order + ("HHIQQQIHHHHHH" if is64 else "HHIIIIIHHHHHH")
        raw = handle.read(struct.calcsize(header_format))
        if len(raw) < struct.calcsize(header_format):
            raise LibraryLoadError(f"{name}: truncated ELF header", REINSTALL)
        fields = struct.unpack(header_format, raw)
        phoff, shoff = fields[4], fields[5]
        phentsize, phnum, shentsize, shnum = fields[8], fields[9], fields[10], fields[11]
        if phoff + phnum * phentsize > size or (shoff and shoff + shnum * shentsize > size):
            raise LibraryLoadError(
                f"{name}: truncated ({size} bytes, its ELF headers describe more)", REINSTALL
            )
        segment_format = order + ("IIQQQQQQ" if is64 else "IIIIIIII")
        for index in range(phnum):
            handle.seek(phoff + index * phentsize)
            segment = struct.unpack(segment_format, handle.read(struct.calcsize(segment_format)))
            kind = segment[0]
            offset, filesz = (segment[2], segment[5]) if is64 else (segment[1], segment[4])
            if kind == _PT_LOAD and offset + filesz > size:
                raise LibraryLoadError(
                    f"{name}: truncated: a loadable segment ends at byte {offset + filesz}, "
                    f"the file has {size}",
                    REINSTALL,
                )
    except struct.error as exc:
        raise LibraryLoadError(
            f"{name}: truncated ELF program headers ({exc})", REINSTALL
        ) from None


#: The most a library file may be (the CPU library is ~50 kB, a GPU one a few MB).
MAX_LIBRARY_BYTES = 1 << 30
#: Descriptors of the private copies dlopen loaded, kept open for the life of the
#: process: the number stays ours, so ``/proc/self/fd/N`` names only our library.
_PRIVATE_COPIES: list[int] = []


def _read_library(path: Path) -> bytes:
    """The bytes of ``path``, read once from one descriptor opened without blocking
    (a FIFO or device put in its place is refused, never waited on)."""
    name = _short_path(path)
    try:
        fd, info = open_regular(path, name)
    except ManifestError as exc:
        raise LibraryLoadError(f"cannot be loaded: {exc.cause}") from None
    try:
        if info.st_size > MAX_LIBRARY_BYTES:
            raise LibraryLoadError(f"{name}: {info.st_size} bytes, too large for a library")
        return read_fd(fd, MAX_LIBRARY_BYTES)
    except OSError as exc:
        raise LibraryLoadError(f"{name}: cannot be read ({exc.strerror})") from None
    finally:
        os.close(fd)


def _private_copy(path: Path, data: bytes) -> str | None:
    """A sealed in-memory copy of ``data`` for dlopen (``/proc/self/fd/N`` of a memfd),
    or ``None`` where that is unavailable (not Linux, no memfd, no /proc).

    Loading a private copy makes the bytes loaded exactly the bytes verified: a file
    swapped after the check, or truncated in place during (or after) dlopen, cannot
    reach the process (a truncated mapping would be a SIGBUS). Cost: one copy of the
    library into memory, measured at ~0.1 ms for the 50 kB CPU library.
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


def _dlopen(target: str, key: str, path: Path, data: bytes) -> ctypes.CDLL:
    """dlopen ``target`` (the private copy, or ``key`` itself); raises OSError.

    Some systems refuse to map a memory file executable (``vm.memfd_noexec``, an
    SELinux execmem policy): there the file itself is loaded instead, if it still
    holds exactly the verified bytes (a library that fails for its own reasons, such
    as an undefined symbol, fails the same way again and reports that).
    """
    # RTLD_LOCAL: the library resolves torch's symbols from the libraries
    # ``import torch`` already loaded, and exports nothing to others.
    try:
        return ctypes.CDLL(target, mode=ctypes.RTLD_LOCAL)
    except OSError:
        if target == key:
            raise
        try:
            unchanged = _read_library(path) == data
        except LibraryLoadError:
            unchanged = False
        if not unchanged:
            raise
    return ctypes.CDLL(key, mode=ctypes.RTLD_LOCAL)


def open_library(path: Path, data: bytes | None = None) -> LoadedLibrary:
    """dlopen ``path`` (once per process) and check its exchange table.

    ``data``: the file's bytes as verified by the caller (:func:`._manifest.read_verified`);
    without it the file is read here, once. Those bytes are ELF-checked and loaded from
    a private copy (:func:`_private_copy`), so nothing that happens to ``path`` meanwhile
    is loaded; where no private copy can be made the path itself is loaded.
    Raises :class:`LibraryLoadError` carrying the loader's message (for example the
    undefined symbol of a library built for the other C++ ABI).
    """
    key = str(path.resolve())
    with LOCK:
        if key in _LIBRARIES:
            return _LIBRARIES[key]
        if data is None:
            data = _read_library(path)
        check_elf_extent(path, data)
        target = _private_copy(path, data) or key
        try:
            handle = _dlopen(target, key, path, data)
        except OSError as exc:
            cause = _one_line(exc).replace(target, key)
            raise LibraryLoadError(f"{_short_path(path)}: cannot be loaded: {cause}") from None
        try:
            func = getattr(handle, EXPORT_TABLE)
        except AttributeError:
            raise LibraryLoadError(
                f"{_short_path(path)}: does not export {EXPORT_TABLE} (not a torch-c-dlpack-ext "
                "library)"
            ) from None
        func.restype = ctypes.c_int64
        func.argtypes = []
        pointer = int(func())
        version = check_table(pointer, _short_path(path))
        loaded = LoadedLibrary(path=path, handle=handle, pointer=pointer, dlpack_version=version)
        _LIBRARIES[key] = loaded
        OWN_TABLES.add(pointer)
        return loaded


def loaded_library(path: Path) -> LoadedLibrary | None:
    """The library this process opened from ``path``, if any."""
    with LOCK:
        return _LIBRARIES.get(str(path.resolve()))


def make_capsule(pointer: int) -> Any:
    """A PyCapsule named ``dlpack_exchange_api`` wrapping ``pointer`` (no destructor:
    the table is static in a library that is never unloaded)."""
    return _PyCapsule_New(pointer, ctypes.addressof(_CAPSULE_NAME_BUFFER), None)


def publish(torch: Any, pointer: int) -> None:
    """Set the capsule and the legacy int attribute on ``torch.Tensor``."""
    capsule = make_capsule(pointer)
    with LOCK:
        setattr(torch.Tensor, CAPSULE_ATTR, capsule)
        setattr(torch.Tensor, LEGACY_INT_ATTR, pointer)


_PACKAGE_PREFIX = os.path.dirname(__file__) + os.sep


def _importer_stacklevel() -> int:
    """The ``stacklevel`` that points a warning at the first caller outside this
    package (the line that imported it), whatever path led here. Like ``warnings``
    itself, importlib's frames are skipped without being counted."""
    level = 1
    frame: FrameType | None = sys._getframe(1)  # the function about to call warnings.warn
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_PREFIX):
        frame = frame.f_back
        while (
            frame is not None
            and "importlib" in frame.f_code.co_filename
            and ("_bootstrap" in frame.f_code.co_filename)
        ):
            frame = frame.f_back
        level += 1
    return level


def _one_line(exc: BaseException, limit: int = 300) -> str:
    """The first line of an error's message, cut to ``limit`` characters (compiler output
    and long paths stay in :func:`status` and the diagnostics, not in the warning)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text if len(text) <= limit else text[:limit] + "..."


def _cause(exc: BaseException) -> str:
    """An error's cause without its remedy (the caller names one remedy for all causes)."""
    return str(getattr(exc, "cause", None) or _one_line(exc))


def _sentence(message: str) -> str:
    """``message`` as a sentence: capitalised (unless it starts with an identifier such as
    ``torch.Tensor``) and ending in a full stop."""
    first = message.split(" ", 1)[0]
    if message[:1].islower() and not any(c in first for c in "._/="):
        message = message[0].upper() + message[1:]
    return message if message.endswith(".") else message + "."


def _announce(messages: Sequence[str]) -> str | None:
    """Emit everything this import has to say as ONE warning; return its text."""
    if not messages:
        return None
    sentences = [_sentence(m) for m in messages]
    text = "torch-c-dlpack-ext: " + " ".join(sentences)
    try:
        warnings.warn(text, TorchCDLPackExtWarning, stacklevel=_importer_stacklevel())
    except Warning:  # the user's filters made it an error (-W error): they asked for that
        raise
    except Exception:  # it cannot be displayed (closed stderr, a failing hook):
        pass  # the import must not fail for that; status() still holds the text
    return text


class _Action:
    """Carries out one decision. Whatever it has to say (the decision's notes, a
    fallback, a failure and its remedy) is collected and emitted as one warning."""

    def __init__(
        self,
        torch: Any,
        info: TorchInfo,
        decision: Decision,
        settings: Settings,
        package_dir: Path,
    ) -> None:
        self.torch = torch
        self.info = info
        self.decision = decision
        self.settings = settings
        self.package_dir = package_dir
        self.messages: list[str] = list(decision.warnings)

    def finish(
        self, kind: DecisionKind, library: Path | None = None, reason: str = "", remedy: str = ""
    ) -> StatusFields:
        text = _announce(self.messages)
        return {
            "kind": kind,
            "library": library,
            "torch": self.info,
            "reason": reason or self.decision.reason,
            "remedy": remedy or self.decision.remedy,
            "warnings": (text,) if text else (),
            "decision": self.decision,
            "settings": self.settings,
        }

    def unavailable(self, reason: str, remedy: str = "") -> StatusFields:
        """The outcome of a failed selection; torch is left as it was."""
        remedy = remedy or self.decision.remedy
        self.messages += [reason, *([remedy] if remedy else [])]
        self.messages.append("Nothing published: torch.Tensor left unchanged")
        return self.finish(DecisionKind.UNAVAILABLE, reason=reason, remedy=remedy)

    def run(self) -> StatusFields:
        handlers = {
            DecisionKind.DEFER: self.nothing,
            DecisionKind.DISABLED: self.nothing,
            DecisionKind.UNAVAILABLE: lambda: self.unavailable(self.decision.reason),
            DecisionKind.PUBLISH_LEGACY: self.publish_legacy,
            DecisionKind.LOAD: self.load,
            DecisionKind.JIT: self.jit,
        }
        return handlers[self.decision.kind]()

    def nothing(self) -> StatusFields:
        return self.finish(self.decision.kind)

    def publish_legacy(self) -> StatusFields:
        try:
            pointer, _ = check_legacy_pointer(getattr(self.torch.Tensor, LEGACY_INT_ATTR))
        except (AttributeError, LibraryLoadError) as exc:
            return self.unavailable(
                f"torch's legacy {LEGACY_INT_ATTR} is unusable: {_cause(exc)}",
                f"unset it, or set {env_var('FORCE')}=1 to load a bundled library instead",
            )
        with LOCK:
            setattr(self.torch.Tensor, CAPSULE_ATTR, make_capsule(pointer))
        return self.finish(DecisionKind.PUBLISH_LEGACY)

    def load(self) -> StatusFields:
        if self.decision.library is not None:
            try:
                loaded = open_library(self.decision.library)
            except LibraryLoadError as exc:
                return self.unavailable(_cause(exc), f"fix or unset {env_var('LIBRARY')}")
            mismatch = override_mismatch(loaded, self.info, self.settings)
            if mismatch is not None:
                return self.unavailable(*mismatch)
            publish(self.torch, loaded.pointer)
            self.messages.append(
                f"loaded {loaded.path} from {env_var('LIBRARY')}: no manifest, so no "
                "size/sha256 check was done"
            )
            return self.finish(DecisionKind.LOAD, loaded.path)
        failures: list[str] = []
        candidates = [self.decision.entry, *self.decision.fallbacks] if self.decision.entry else []
        loaded_entry = self.try_entries(candidates, failures)
        if loaded_entry is not None:
            return self.finish(DecisionKind.LOAD, loaded_entry.path)
        if self.settings.jit:
            # Opted into JIT: build for this torch rather than give up.
            return self.jit(
                f"{'; '.join(failures)}; {env_var('JIT')} asks to build a library instead"
            )
        backend = self.decision.backend
        remedy = (
            gpu_library_remedy(backend)
            if backend is not None and backend is not Backend.CPU
            else f"{REINSTALL}; or set {env_var('JIT')}=1 to build a library for this torch"
        )
        return self.unavailable("no library could be loaded: " + "; ".join(failures), remedy)

    def try_entries(
        self, entries: Sequence[ManifestEntry], failures: list[str]
    ) -> LoadedLibrary | None:
        """Verify, open and publish the first entry that works; record why others failed."""
        for entry in entries:
            try:
                loaded = open_library(*read_verified(entry, self.package_dir))
            except (ManifestError, LibraryLoadError) as exc:
                failures.append(_cause(exc))
                continue
            if failures:
                self.messages.append(f"using {describe_entry(entry)} after: {'; '.join(failures)}")
            publish(self.torch, loaded.pointer)
            return loaded
        return None

    def jit(self, reason: str = "") -> StatusFields:
        from . import _jit

        backend = self.decision.backend or self.info.backend
        try:
            loaded = open_library(*_jit.build(self.torch, self.info, backend, self.settings))
        except TorchCDLPackExtError as exc:
            return self.unavailable(
                f"the JIT build of the {backend.value} library for torch {self.info.version} "
                f"failed: {_one_line(exc)}",
                f"fix that cause (python -m torch_c_dlpack_ext shows details), or unset "
                f"{env_var('JIT')}",
            )
        publish(self.torch, loaded.pointer)
        return self.finish(DecisionKind.JIT, loaded.path, reason)


def override_mismatch(
    loaded: LoadedLibrary, info: TorchInfo, settings: Settings
) -> tuple[str, str] | None:
    """Why a ``TORCH_C_DLPACK_EXT_LIBRARY`` library must not be published on this torch
    (reason, remedy), from its ``TorchCDLPackExtBuildInfo``; ``None`` if it may.

    The manifest's checks, done on what the library says it is: another torch minor is
    always refused (``THPVariable``'s layout and ATen's ABI differ between minors, so
    the first call could crash); another C++ ABI too; another backend than the one this
    torch needs (the CPU library on a GPU torch would answer ``current_work_stream``
    without torch's stream) unless ``TORCH_C_DLPACK_EXT_BACKEND`` asks for exactly it.
    A library that does not say its backend is refused on a GPU torch for that reason.
    """
    import json

    var = env_var("LIBRARY")
    name = _short_path(loaded.path)
    try:
        raw = loaded.build_info()
        described = json.loads(raw) if raw else None
    except (ValueError, RecursionError, UnicodeError):
        described = None
    built: dict[str, Any] = described if isinstance(described, dict) else {}
    fix = (
        f"point {var} at a library built for this torch, set {env_var('JIT')}=1 instead, "
        "or unset it"
    )
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


def _failed_before_deciding(reason: str, remedy: str) -> StatusFields:
    """torch could not be imported or described: nothing is decided, one warning says why."""
    text = _announce([reason, remedy, "Nothing published"])
    return {
        "kind": DecisionKind.UNAVAILABLE,
        "reason": reason,
        "remedy": remedy,
        "warnings": (text,) if text else (),
    }


def deferred_status() -> Status:
    """The :class:`Status` of an import that deferred on the fast path (torch had the
    API and no override was set); describes torch without acting on anything."""
    import torch

    from ._status import Status

    try:
        info = TorchInfo.from_torch(torch)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # status() must not raise where the import did not
        reason = (
            "torch provides __dlpack_c_exchange_api__ itself (it cannot be described "
            f"further: {type(exc).__name__}: {_one_line(exc, 200)})"
        )
        return Status(
            kind=DecisionKind.DEFER,
            reason=reason,
            decision=Decision(kind=DecisionKind.DEFER, reason=reason),
            settings=Settings(),
        )
    settings = Settings()
    # The DEFER rule's own words: torch's capsule, or one an earlier import of ours set.
    reason = decide(info, (), settings).reason
    if not info.has_capsule:  # torch's capsule was changed after the import
        reason = f"torch {info.version} provided __dlpack_c_exchange_api__ at import"
    return Status(
        kind=DecisionKind.DEFER,
        torch=info,
        reason=reason,
        decision=Decision(kind=DecisionKind.DEFER, backend=info.backend, reason=reason),
        settings=settings,
    )


def settings_of(environ: Mapping[str, str]) -> Settings:
    """The runtime settings in ``environ``: ``Settings()`` when no ``TORCH_C_DLPACK_EXT_*``
    variable is set (the common case parses nothing), else :func:`._settings.read_settings`."""
    if not any(name.startswith(ENV_PREFIX) for name in environ):
        return Settings()
    from ._settings import read_settings

    return read_settings(environ)


def select_and_load(environ: Mapping[str, str], package_dir: Path) -> StatusFields:
    """Run the whole selector once: read settings, torch and (if needed) the manifest,
    decide, and act. Never raises for a bad environment, a bad installation, a bad
    library or an odd torch; the returned fields of a :class:`._status.Status` say what
    happened, and exactly one warning is emitted whenever nothing was published (and
    whenever something needs saying after all)."""
    with LOCK:
        try:
            import torch
        # Whatever torch's own import raises (ImportError, OSError from its shared libraries...).
        except Exception as exc:
            return _failed_before_deciding(
                f"torch is not importable ({type(exc).__name__}: {_one_line(exc, 200)})",
                "install torch, then import torch_c_dlpack_ext again",
            )
        try:
            info = TorchInfo.from_torch(torch)
        except Exception as exc:  # an odd torch build must not break every importer
            return _failed_before_deciding(
                f"cannot describe the running torch ({type(exc).__name__}: {_one_line(exc, 200)})",
                "report it with the output of python -m torch_c_dlpack_ext",
            )
        settings = settings_of(environ)
        manifest: tuple[ManifestEntry, ...] | ManifestError = ()
        if manifest_needed(info, settings):
            try:
                manifest = load_manifest(package_dir / MANIFEST_NAME)
            except ManifestError as exc:
                manifest = exc
        decision = decide(info, manifest, settings)
        return _Action(torch, info, decision, settings, package_dir).run()


def build_for_current_torch(environ: Mapping[str, str]) -> tuple[Status, Path]:
    """Build, load and publish for the running torch; the body of
    :func:`torch_c_dlpack_ext.build_for_current_torch`. Raises what the build raises."""
    from . import _jit
    from ._status import Status

    try:
        import torch
    except ImportError as exc:
        raise TorchInstallError(
            f"cannot build for the current torch: torch is not importable ({exc}); install it"
        ) from None

    with LOCK:
        info = TorchInfo.from_torch(torch)
        settings = settings_of(environ)
        for problem in settings.problems:
            # A bad BACKEND must not quietly become the detected backend.
            if problem.variable in (env_var("BACKEND"), env_var("CACHE_DIR")):
                raise ConfigError(f"cannot build for the current torch: {problem.message}")
        backend = settings.backend or info.backend
        loaded = open_library(*_jit.build(torch, info, backend, settings))
        publish(torch, loaded.pointer)
        status = Status(
            kind=DecisionKind.JIT,
            library=loaded.path,
            torch=info,
            reason=f"built for torch {info.version} ({backend.value}) on request",
            settings=settings,
        )
        return status, loaded.path
