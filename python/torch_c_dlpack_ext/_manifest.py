"""The manifest: what libraries a wheel bundles, and how to verify them before dlopen.

``manifest.json`` lives next to the package's ``__init__.py``::

    {"schema": 1,
     "libraries": [{"file": "libs/libtorch_c_dlpack_ext-torch2.6-cpu-cxx11abi0.so",
                    "torch": "2.6", "torch_build": "2.6.0+cu124", "backend": "cpu",
                    "cxx11_abi": false, "dlpack": "1.3", "toolchain": "g++ 12.2.0",
                    "gpu_toolkit": null, "platform": "linux_x86_64",
                    "size": 178000, "sha256": "..."}]}

The selector reads this file; it never globs or parses file names. Size and
sha256 are checked before a library is loaded, because dlopen of a truncated
file can kill the process with SIGBUS where no ``except`` helps.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ._naming import Backend, parse_backend
from ._record import FrozenRecord
from .errors import ManifestError

__all__ = [
    "SCHEMA_VERSION",
    "ManifestEntry",
    "atomic_write_bytes",
    "dump_manifest",
    "load_manifest",
    "sha256_of",
    "verify_file",
    "write_manifest",
]

SCHEMA_VERSION = 1


class ManifestEntry(FrozenRecord):
    """One bundled library and the exact target it was built for."""

    #: Path relative to the directory holding ``manifest.json`` (POSIX separators).
    file: str
    #: Torch ``major.minor`` the library targets (what the selector matches on).
    torch: str
    #: Full version of the torch it was compiled against (``2.6.0+cu124``).
    torch_build: str
    backend: Backend
    #: libstdc++ dual ABI (``_GLIBCXX_USE_CXX11_ABI``); ``None`` where not applicable.
    cxx11_abi: bool | None
    #: DLPack version of the header the library was compiled with (``1.3``).
    dlpack: str
    #: Compiler identity (``g++ 12.2.0``).
    toolchain: str
    #: CUDA / ROCm version the GPU variant was compiled with, else ``None``.
    gpu_toolkit: str | None
    #: Wheel platform tag of the build host (``linux_x86_64``).
    platform: str
    size: int
    sha256: str

    @property
    def torch_version(self) -> tuple[int, int]:
        major, minor = self.torch.split(".")
        return int(major), int(minor)

    def to_json(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in self.field_names()}
        data["backend"] = self.backend.value
        return data

    @classmethod
    def from_json(cls, data: Any) -> ManifestEntry:
        if not isinstance(data, dict):
            raise ManifestError(f"manifest entry is not an object: {data!r}")
        names = set(cls.field_names())
        missing = sorted(names - data.keys())
        if missing:
            raise ManifestError(f"manifest entry {data.get('file')!r} lacks {', '.join(missing)}")
        try:
            values = {name: data[name] for name in names}
            values["backend"] = parse_backend(values["backend"])
            entry = cls(**values)
            entry.torch_version  # noqa: B018 - validates "X.Y"
        except (TypeError, ValueError) as exc:
            raise ManifestError(f"manifest entry {data.get('file')!r} is invalid: {exc}") from None
        if Path(entry.file).is_absolute() or ".." in Path(entry.file).parts:
            raise ManifestError(f"manifest entry names a path outside the package: {entry.file!r}")
        return entry


def sha256_of(path: Path) -> str:
    """Hex sha256 of a file's content."""
    digest = hashlib.sha256()
    # One small buffer, reused: a fresh 1 MiB bytes object per read costs page faults,
    # ~0.15 ms for a 200 kB library on the import path.
    buffer = bytearray(1 << 16)
    view = memoryview(buffer)
    with path.open("rb", buffering=0) as handle:
        while count := handle.readinto(buffer):
            digest.update(view[:count])
    return digest.hexdigest()


def verify_file(entry: ManifestEntry, root: Path) -> Path:
    """Return the library's path after checking it exists with the recorded size and sha256.

    Raises :class:`ManifestError` saying which check failed.
    """
    path = root / entry.file
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise ManifestError(
            f"{entry.file}: listed in the manifest but not readable ({exc.strerror}); "
            "reinstall torch-c-dlpack-ext"
        ) from None
    if size != entry.size:
        raise ManifestError(
            f"{entry.file}: size {size} bytes, manifest says {entry.size} "
            "(a partial copy or a full disk?); reinstall torch-c-dlpack-ext"
        )
    digest = sha256_of(path)
    if digest != entry.sha256:
        raise ManifestError(
            f"{entry.file}: sha256 {digest[:12]}... does not match the manifest's "
            f"{entry.sha256[:12]}...; reinstall torch-c-dlpack-ext"
        )
    return path


def load_manifest(path: Path) -> tuple[ManifestEntry, ...]:
    """Read and validate a manifest file. Raises :class:`ManifestError`."""
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ManifestError(f"no manifest at {path}") from None
    except OSError as exc:
        raise ManifestError(f"cannot read manifest {path}: {exc.strerror}") from None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ManifestError(f"manifest {path} is not valid JSON: {exc}") from None
    schema = data.get("schema") if isinstance(data, dict) else None
    if schema != SCHEMA_VERSION:
        raise ManifestError(
            f"manifest {path} has schema {schema!r}, "
            f"this version of torch-c-dlpack-ext reads schema {SCHEMA_VERSION}"
        )
    libraries = data.get("libraries")
    if not isinstance(libraries, list):
        raise ManifestError(f"manifest {path} has no 'libraries' list")
    return tuple(ManifestEntry.from_json(item) for item in libraries)


def dump_manifest(entries: Iterable[ManifestEntry]) -> bytes:
    """Canonical, deterministic bytes of a manifest (sorted entries and keys)."""
    ordered = sorted(entries, key=lambda e: e.file)
    data = {"schema": SCHEMA_VERSION, "libraries": [e.to_json() for e in ordered]}
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename,
    so readers see either the old content or the new one, never half of it."""
    import tempfile  # writers only (the build); import reads

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_manifest(path: Path, entries: Iterable[ManifestEntry]) -> None:
    atomic_write_bytes(path, dump_manifest(entries))
