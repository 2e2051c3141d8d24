"""Opt-in build of the library for the running torch (``TORCH_C_DLPACK_EXT_JIT=1`` or
:func:`torch_c_dlpack_ext.build_for_current_torch`), through the core's compiler driver.

The one compiler driver (:mod:`_torch_c_dlpack_ext_core.driver`) does the work,
with its build cache and file lock, so several processes asking at once produce one
build. The output goes to ``<cache dir>/<key>/`` where the key covers the full torch
identity: two torch
builds that share ``major.minor`` (``2.8.0`` and ``2.8.0a0+abc``, or the two C++
ABIs of 2.6) never share a library.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from _torch_c_dlpack_ext_core import naming
from _torch_c_dlpack_ext_core.errors import (
    BuildError,
    ConfigError,
    ManifestError,
    TorchCDLPackExtError,
    TorchInstallError,
)
from _torch_c_dlpack_ext_core.files import read_verified
from _torch_c_dlpack_ext_core.manifest import ManifestEntry
from _torch_c_dlpack_ext_core.naming import Backend, env_var, library_filename, user_cache_dir
from _torch_c_dlpack_ext_core.trust import TrustedOwners, read_trusted
from _torch_c_dlpack_ext_core.version import __version__

from ._model import Settings, TorchInfo

if TYPE_CHECKING:
    from types import ModuleType

    from _torch_c_dlpack_ext_core.driver import BuildPolicy

__all__ = ["build", "build_portable", "cache_key", "headers_problem", "python_tag"]

#: The most a build record may be (they are about 2 kB).
_MAX_RECORD_BYTES = 1 << 20


def python_tag() -> str:
    """``cp311`` / ``cp314t``: the interpreter the library's Python calls are built for,
    from how CPython was built (:func:`~_torch_c_dlpack_ext_core.naming.python_tag`), never
    from the runtime GIL state: a 3.13t with ``PYTHON_GIL=1`` keeps its own cache."""
    return naming.python_tag()


def cache_key(info: TorchInfo, backend: Backend, pytag: str) -> str:
    """Directory name for one torch identity: readable prefix, digest of everything.

    The digest covers ``torch.__version__`` with its local part, the C++ ABI, the
    backend, the Python tag and this package's version (new sources, new build).
    """
    identity = "|".join((info.version, str(info.cxx11_abi), backend.value, pytag, __version__))
    digest = hashlib.sha256(identity.encode("utf-8")).hexdigest()[:16]
    readable = re.sub(r"[^0-9A-Za-z.]+", "_", info.version)
    return f"torch{readable}-{backend.value}-{pytag}-{digest}"


def headers_problem(torch: ModuleType | None) -> str:
    """Why a build cannot compile against this torch's C++ headers, as a message says it
    (``""``: it can, as far as files tell, or no torch is imported): torch has no
    ``__file__``, or no ``include/`` directory beside it, which every torch wheel ships and
    the driver compiles against (:class:`~_torch_c_dlpack_ext_core.torchinstall.TorchInstall`).
    Read only for messages (the status's native-speed line), never on the import's path."""
    if torch is None:
        return ""
    version = getattr(torch, "__version__", "?")
    where = getattr(torch, "__file__", None)
    if not isinstance(where, str):
        return f"torch {version} has no __file__, so no C++ headers can be found for it"
    include = Path(where).parent / "include"
    if not include.is_dir():
        return (
            f"torch {version} has no C++ headers ({include} does not exist), which a native "
            "build compiles against"
        )
    return ""


def _cache_root(settings: Settings) -> tuple[Path, str]:
    """The cache root and the fix a message should advise when it is unusable (the
    setting it came from: the project's variable, ``XDG_CACHE_HOME``, or neither).

    The project's variable is taken from ``settings`` only (read once, by
    :func:`._settings.read_settings`, which refuses a relative path and counts a blank
    value as unset); it is never re-read here. Raises :class:`ConfigError` when there is
    no absolute user cache directory (:func:`~_torch_c_dlpack_ext_core.naming.user_cache_dir`).
    """
    point = f"point {env_var('CACHE_DIR')} at a writable directory"
    if settings.cache_dir is not None:
        return settings.cache_dir, point
    root, variable = user_cache_dir()
    if variable is not None:
        return root, f"it is under {variable}: make that writable, or {point}"
    return root, f"it is the user cache directory: make it writable, or {point}"


def _reuse_read_only(
    output_dir: Path, info: TorchInfo, backend: Backend, owners: TrustedOwners
) -> tuple[Path, bytes] | None:
    """The library an earlier build left in a cache directory we cannot write to: its
    path and the bytes that were verified, if

    * the record, the library and every directory above them could have been written by
      ``owners`` only (:mod:`_torch_c_dlpack_ext_core.trust`; else the
      :class:`UntrustedPathError` propagates: the record carries the library's sha256
      itself, so whoever could write it could plant both);
    * the record matches every key field this process can compute: the library's name,
      the torch build, backend and C++ ABI, the Python ABI and this package's version;
    * the library's size and sha256 match the record.
    """
    major, minor = info.major_minor
    name = library_filename(major, minor, backend, info.cxx11_abi)
    try:
        raw = read_trusted(output_dir / f"{name}.build.json", _MAX_RECORD_BYTES, owners)
        record = json.loads(raw)
        entry = ManifestEntry.from_json(record.get("entry") if isinstance(record, dict) else None)
        found = (
            entry.file,
            entry.torch_build,
            entry.backend,
            entry.cxx11_abi,
            entry.python,
            record.get("package"),
        )
        wanted = (
            name,
            info.version,
            backend,
            info.cxx11_abi,
            naming.running_python_target(),
            __version__,
        )
        if found != wanted:
            return None
        return read_verified(entry, output_dir, owners=owners)
    except (OSError, ValueError, ManifestError):
        return None


def _writable_cache(settings: Settings, name: str) -> Path:
    """``<cache root>/<name>``, created and checked writable; raises :class:`ConfigError`."""
    root, fix = _cache_root(settings)
    output_dir = root / name
    problem = _not_writable(output_dir)
    if problem is not None:
        raise ConfigError(
            f"JIT cache directory {root} is not writable ({problem.strerror or problem}); {fix}"
        )
    return output_dir


def _not_writable(output_dir: Path) -> OSError | None:
    """Why ``output_dir`` cannot be created or written (``None``: it can), probed with a
    file of a unique name: several processes may probe the same directory at once."""
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=output_dir):
            pass
    except OSError as exc:
        return exc
    return None


def _policy(owners: TrustedOwners, settings: Settings) -> BuildPolicy:
    """How every JIT build runs: silent (a compile says only its one building line), no
    stable ABI audit (the library serves this interpreter only: the cache key holds its
    Python tag, so the audit the release runs on abi3 wheels has nothing to add), the
    output checked against ``owners`` before it is loaded, and ``settings.lock_timeout``
    to wait for another process's build of it."""
    from _torch_c_dlpack_ext_core.driver import BuildPolicy

    return BuildPolicy(
        echo=False, stable_abi_audit=False, owners=owners, lock_timeout=settings.lock_timeout
    )


def build_portable(settings: Settings) -> tuple[Path, bytes]:
    """Build (or reuse) the portable table for this interpreter, with only a C compiler,
    ``Python.h`` and the DLPack header (no torch headers, no C++): where the universal
    wheel's JIT cannot build the native library, or torch needs the portable one. Its
    key is this package's version and this interpreter (``portable-cp311-<digest>``).
    Returns the path and the verified bytes. Raises :class:`TorchCDLPackExtError`."""
    from _torch_c_dlpack_ext_core import driver

    tag = python_tag()
    digest = hashlib.sha256(f"portable|{tag}|{__version__}".encode()).hexdigest()[:16]
    output_dir = _writable_cache(settings, f"portable-{tag}-{digest}")

    def say_building(plan: driver.PortablePlan) -> None:
        print(
            f"torch-c-dlpack-ext: building the portable table {plan.filename} in "
            f"{output_dir} (once; later imports reuse it)",
            file=sys.stderr,
            flush=True,
        )

    owners = TrustedOwners(settings.trusted_owner)
    try:
        entry = driver.compile_portable_library(
            driver.PortableRequest(output_dir=output_dir),
            _policy(owners, settings),
            on_compile=say_building,
        )
    except OSError as exc:
        raise BuildError(f"JIT build of the portable table in {output_dir} failed: {exc}") from None
    # As for the native library: the verified bytes, from a descriptor whose owner and
    # mode were checked (trust.py).
    return _read_output(entry, output_dir, owners)


def _read_output(
    entry: ManifestEntry, output_dir: Path, owners: TrustedOwners
) -> tuple[Path, bytes]:
    """The verified bytes of a library this JIT just built or reused. A file that no longer
    matches its record (changed or removed meanwhile) is a build problem, fixed by
    building again; never "reinstall", which repairs the installation, not this cache."""
    try:
        return read_verified(entry, output_dir, owners=owners)
    except ManifestError as exc:
        raise BuildError(
            f"the JIT build in {output_dir} does not match its record: {exc.cause}; remove "
            f"{output_dir} and import again to build it anew"
        ) from None


def build(
    torch: ModuleType, info: TorchInfo, backend: Backend, settings: Settings
) -> tuple[Path, bytes]:
    """Build (or reuse) the library for the running torch; return its path and the
    bytes whose size and sha256 were verified (the loader loads exactly those).

    Raises a :class:`TorchCDLPackExtError` subclass: :class:`ConfigError` for an
    unusable cache directory, :class:`TorchInstallError` for a torch without a
    ``__file__`` (nothing to compile against), the driver's :class:`BuildError`
    subclasses for a missing compiler or DLPack header.
    """
    root, fix = _cache_root(settings)
    output_dir = root / cache_key(info, backend, python_tag())
    owners = TrustedOwners(settings.trusted_owner)
    problem = _not_writable(output_dir)
    if problem is not None:
        # A read-only cache (a shared or baked-in one) that already holds the build.
        reused = _reuse_read_only(output_dir, info, backend, owners)
        if reused is not None:
            return reused
        raise ConfigError(
            f"JIT cache directory {root} is not writable ({problem.strerror or problem}) and "
            f"holds no build for this torch; {fix}"
        )
    if torch.__file__ is None:
        raise TorchInstallError(
            f"the running torch {info.version} has no __file__ (imported from something "
            "other than its files), so the JIT cannot find its headers and libraries; "
            "install torch from a wheel or a package"
        )
    torch_dir = Path(torch.__file__).parent
    from _torch_c_dlpack_ext_core import driver

    def say_building(plan: driver.BuildPlan) -> None:
        # The one line a JIT import prints, and only when it compiles (once per torch
        # build): a cache hit, like any successful import, prints nothing. A note about
        # this build (CUDA headers of another major) belongs to it: said here, once.
        print(
            f"torch-c-dlpack-ext: building {plan.filename} for torch {info.version} in "
            f"{output_dir} (once; later imports reuse it)",
            *(f"\ntorch-c-dlpack-ext: note: {note}" for note in plan.notes),
            file=sys.stderr,
            sep="",
            flush=True,
        )

    try:
        entry = driver.compile_library(
            driver.BuildRequest(torch=torch_dir, backend=backend, output_dir=output_dir),
            _policy(owners, settings),
            on_compile=say_building,
        )
    except TorchCDLPackExtError:
        raise
    except OSError as exc:
        raise BuildError(f"JIT build in {output_dir} failed: {exc}") from None
    # The bytes that were hashed are the bytes loaded (no window for a swapped file), read
    # from a descriptor whose owner and mode were checked.
    return _read_output(entry, output_dir, owners)
