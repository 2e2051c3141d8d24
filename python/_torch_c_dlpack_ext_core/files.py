"""Verified reads and atomic writes, the core's file I/O: non-blocking reads of regular
files only, :func:`read_verified` and :func:`verify_file` (size and sha256 checked on the
bytes read), :func:`load_manifest` and :func:`write_manifest`, and atomic writes through
temporary files that get the umask's mode (not :func:`tempfile.mkstemp`'s 0600: build caches
and ``build/cells/`` are shared).

Readers open without blocking (a FIFO planted where a file should be cannot hang an
import), refuse anything but a regular file, and check a library's size and sha256 on the
bytes they return, read once from one descriptor. Writers go through a temporary file in
the same folder and a rename, so a reader sees the old content or the new, never half; what
they publish gets the umask's mode (not :func:`tempfile.mkstemp`'s 0600), because a build
cache one user writes is meant to be read by others.

The manifest's model (:mod:`.manifest`) does no I/O; this module reads and writes it.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import REINSTALL, ManifestError, brief
from .manifest import MAX_MANIFEST_BYTES, ManifestEntry, dump_manifest, parse_manifest
from .trust import read_fd

if TYPE_CHECKING:
    from .trust import TrustedOwners

__all__ = [
    "atomic_write_bytes",
    "file_kind",
    "load_manifest",
    "new_temp_file",
    "open_regular",
    "read_fd",
    "read_verified",
    "reserve_temp_file",
    "sha256_of",
    "verify_file",
    "write_manifest",
]


def sha256_of(path: Path) -> str:
    """Hex sha256 of a file's content."""
    with path.open("rb", buffering=0) as handle:
        return _sha256_of_fd(handle.fileno())


def _sha256_of_fd(fd: int) -> str:
    digest = hashlib.sha256()
    # One small buffer, reused: a fresh 1 MiB bytes object per read costs page faults,
    # ~0.15 ms for a 200 kB library on the import path.
    buffer = bytearray(1 << 16)
    view = memoryview(buffer)
    with open(fd, "rb", buffering=0, closefd=False) as handle:
        while count := handle.readinto(buffer):
            digest.update(view[:count])
    return digest.hexdigest()


#: ``O_NONBLOCK``: opening a FIFO planted where a file should be must not block the import
#: (the opened object is then refused as not a regular file). ``O_BINARY`` on Windows.
_OPEN_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)


def file_kind(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` is, for messages: ``"a directory"``, ``"a
    FIFO"``, ``"a socket"``, ``"a character device"``, ``"a block device"``,
    ``"a symbolic link"``, ``"a regular file"``, else ``"a special file"``."""
    kinds = (
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISLNK, "a symbolic link"),
    )
    return next((kind for test, kind in kinds if test(mode)), "a special file")


def _open_regular(
    path: Path, what: str, missing: str = "", owners: TrustedOwners | None = None
) -> tuple[int, os.stat_result]:
    """Open ``path`` read-only without blocking and return ``(fd, fstat)`` of a regular file.

    Raises :class:`ManifestError` (cause only; the caller adds its remedy) for a missing,
    unreadable or non-regular file. ``owners``: open it with :func:`.trust.open_trusted`
    (a file another user could have written raises its
    :class:`~.errors.UntrustedPathError`).
    """
    try:
        if owners is not None:
            from .trust import open_trusted

            fd = open_trusted(path, owners)[0]
        else:
            fd = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError:
        raise ManifestError(missing or f"{what} is missing") from None
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise ManifestError(f"{what} is not readable ({reason})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ManifestError(f"{what} is {file_kind(info.st_mode)}, not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd, info


def verify_file(entry: ManifestEntry, root: Path) -> Path:
    """Return the library's path after checking it is a regular file inside ``root``
    (a symlink may not lead out of it) with the recorded size and sha256.

    Raises :class:`ManifestError` saying which check failed (``cause``) and the
    reinstall command (``remedy``).
    """
    return read_verified(entry, root)[0]


def read_verified(
    entry: ManifestEntry, root: Path, *, owners: TrustedOwners | None = None
) -> tuple[Path, bytes]:
    """:func:`verify_file`, returning the library's bytes too: the ones that were hashed,
    read once from one descriptor, so a loader that loads exactly these bytes (see
    :func:`._loader.open_library`) loads what was verified, whatever happens to the
    path afterwards. ``owners``: the file and every directory above it must pass
    :func:`.trust.open_trusted` for them (a JIT cache), checked on that descriptor."""
    path = root / entry.file
    name = brief(entry.file, 80)
    try:
        real, real_root = os.path.realpath(path), os.path.realpath(root)
        inside = os.path.commonpath([real, real_root]) == real_root
    except (OSError, ValueError):
        inside = False
    if not inside:
        raise ManifestError(
            f"{name}: listed in the manifest but it leads outside the package directory "
            "(a symlink?)",
            REINSTALL,
        )
    try:
        fd, info = _open_regular(path, f"{name} (listed in the manifest)", owners=owners)
    except ManifestError as exc:
        raise ManifestError(exc.cause, REINSTALL) from None
    try:
        if info.st_size != entry.size:
            raise ManifestError(
                f"{name}: {info.st_size} bytes, the manifest says {entry.size} "
                "(a partial copy or a full disk?)",
                REINSTALL,
            )
        try:
            data = read_fd(fd, entry.size + 1)  # one more: a file that grew is caught
        except OSError as exc:
            raise ManifestError(f"{name}: cannot be read ({exc.strerror})", REINSTALL) from None
    finally:
        os.close(fd)
    if len(data) != entry.size:
        raise ManifestError(
            f"{name}: {len(data)} bytes read, the manifest says {entry.size} "
            "(it changed while it was read)",
            REINSTALL,
        )
    digest = hashlib.sha256(data).hexdigest()
    if digest != entry.sha256:
        raise ManifestError(
            f"{name}: sha256 {digest[:12]}... does not match the manifest's {entry.sha256[:12]}...",
            REINSTALL,
        )
    return path, data


def open_regular(
    path: Path, what: str, *, owners: TrustedOwners | None = None
) -> tuple[int, os.stat_result]:
    """Open ``path`` read-only, without blocking (a FIFO put in its place cannot hang
    the caller) and close-on-exec; return ``(fd, fstat)`` of a regular file. Raises
    :class:`ManifestError` (cause only) for a missing, unreadable or non-regular file;
    with ``owners``, :class:`~.errors.UntrustedPathError` where :func:`.trust.open_trusted`
    refuses it."""
    return _open_regular(path, what, owners=owners)


def load_manifest(path: Path) -> tuple[ManifestEntry, ...]:
    """Read and validate a manifest file. Raises :class:`ManifestError`.

    Schema 1: a UTF-8 JSON object of at most :data:`MAX_MANIFEST_BYTES`,
    ``{"schema": 1, "libraries": [entry, ...]}`` (at most :data:`.manifest.MAX_ENTRIES`), every
    entry an object with exactly-typed fields: ``file`` (see :func:`.manifest.check_library_path`),
    ``torch`` (``"2.8"``), ``python`` (``"abi3"``, ``"abi3.12"``, ``"3.14t"``, ``"3.11"``),
    ``backend`` (``cpu``/``cuda``/``rocm``; a torch-agnostic entry says ``any`` in
    ``torch``, ``torch_build`` and ``backend`` and null in ``cxx11_abi`` and
    ``gpu_toolkit``, all five or none), ``cxx11_abi`` (bool or null), ``size`` (integer),
    ``sha256`` (64 lowercase hex), ``gpu_toolkit`` (string or null) and the other
    strings (non-empty, printable, bounded); ``cell`` may be absent (a value that is
    not plain text reads as absent). Unknown keys are ignored (a newer writer may add
    some). The file itself must be a regular file: a directory, FIFO or device
    is refused without blocking.
    """
    fd, info = _open_regular(path, f"manifest {path}", f"no manifest at {path}")
    try:
        if info.st_size > MAX_MANIFEST_BYTES:
            raise ManifestError(
                f"manifest {path} is {info.st_size} bytes, more than a manifest can be "
                f"({MAX_MANIFEST_BYTES})",
                REINSTALL,
            )
        chunks: list[bytes] = []
        total = 0
        # Bounded even if the file grows while it is read.
        while total <= MAX_MANIFEST_BYTES and (chunk := os.read(fd, 1 << 16)):
            chunks.append(chunk)
            total += len(chunk)
    except OSError as exc:
        raise ManifestError(f"cannot read manifest {path} ({exc.strerror})", REINSTALL) from None
    finally:
        os.close(fd)
    if total > MAX_MANIFEST_BYTES:
        raise ManifestError(f"manifest {path} grew past {MAX_MANIFEST_BYTES} bytes", REINSTALL)
    return parse_manifest(b"".join(chunks), f"manifest {path}")


def new_temp_file(directory: Path, prefix: str, suffix: str, mode: int = 0o666) -> tuple[int, Path]:
    """Create a new file with a unique name in ``directory``; its open descriptor and path.

    The name is ``<prefix><pid>-<12 hex><suffix>``. Like :func:`tempfile.mkstemp`, but the
    file gets ``mode`` less the umask (0644 for 0o666 under the usual 022), as any other new
    file would, instead of mkstemp's 0600:
    what is renamed into place is meant to be shared (a cache another user reuses read-only,
    ``build/cells/*/manifest.json``).
    """
    import secrets  # writers only (the build); import reads

    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    # The writer's pid in the name: a later build removes what a killed one left
    # (:func:`.buildlock.clean_stale_temps`).
    pid = os.getpid()
    for _ in range(100):
        path = directory / f"{prefix}{pid}-{secrets.token_hex(6)}{suffix}"
        try:
            return os.open(path, flags, mode), path
        except FileExistsError:
            continue
    raise FileExistsError(f"no unused temporary name {prefix}*{suffix} in {directory}")


def reserve_temp_file(
    directory: Path, prefix: str, suffix: str, mode: int = 0o777
) -> tuple[Path, int]:
    """A new, empty, closed file of :func:`new_temp_file` for a tool to write (a linker's
    output), and the permission bits it got (``mode`` less the umask: 0755 for 0o777 under
    022), to give back to what the tool leaves there, which it may have replaced."""
    fd, path = new_temp_file(directory, prefix, suffix, mode)
    try:
        return path, os.fstat(fd).st_mode & 0o777
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename,
    so readers see either the old content or the new one, never half of it. The file gets
    the umask's mode (:func:`new_temp_file`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = new_temp_file(path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_manifest(path: Path, entries: Iterable[ManifestEntry]) -> None:
    atomic_write_bytes(path, dump_manifest(entries))
