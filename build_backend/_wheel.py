"""Wheel writing: one reproducible writer, and the backend's wheel implementations.

Every wheel of the project (the backend's own, and the combined / variant /
universal wheels ``devtools/build/wheels.py`` assembles) goes through
:class:`WheelWriter`: entries sorted, timestamps from ``SOURCE_DATE_EPOCH``
(default 1980-01-01, the oldest a zip can hold), fixed permissions, RECORD last,
written to a temporary name and renamed into place.
"""

from __future__ import annotations

import base64
import hashlib
import os
import tempfile
import time
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ._source import CORE_DIR, PACKAGE_DIR, ROOT

if TYPE_CHECKING:
    from _torch_c_dlpack_ext_core.manifest import ManifestEntry
    from _torch_c_dlpack_ext_core.naming import Backend
    from _torch_c_dlpack_ext_core.torchinstall import TorchInstall

    from ._metadata import ProjectMetadata
    from ._options import BackendOptions

__all__ = [
    "WheelWriter",
    "build_editable_impl",
    "build_wheel_impl",
    "package_files",
    "platform_tag",
    "source_files",
    "wheel_python",
    "wheel_tag",
]

#: Python files and data of the package that every wheel installs.
_PACKAGE_SUFFIXES = (".py", ".typed")
_CSRC_SUFFIXES = (".cc", ".cpp", ".h", ".hpp", ".inc", ".map", ".c")
_ZIP_EPOCH = 315532800  # 1980-01-01T00:00:00Z


def _zip_time() -> tuple[int, int, int, int, int, int]:
    """The zip timestamp of every entry: ``SOURCE_DATE_EPOCH`` (validated by the one
    check, :func:`._options.source_date_epoch`), no earlier than 1980-01-01."""
    from ._options import source_date_epoch

    epoch = source_date_epoch()
    return time.gmtime(max(_ZIP_EPOCH if epoch is None else epoch, _ZIP_EPOCH))[:6]


def _urlsafe_digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


class WheelWriter:
    """Collect files, then :meth:`write` one deterministic wheel."""

    def __init__(self, *, name: str, version: str, tag: str, label: str | None = None) -> None:
        self.name = name
        self.version = version
        self.tag = tag
        self.label = label
        self._files: dict[str, tuple[bytes, bool]] = {}

    @property
    def dist_info(self) -> str:
        return f"{self.name}-{self.version}.dist-info"

    @property
    def filename(self) -> str:
        suffix = f"-{self.label}" if self.label else ""
        return f"{self.name}-{self.version}-{self.tag}{suffix}.whl"

    def add(self, arcname: str, data: bytes, *, executable: bool = False) -> None:
        if arcname in self._files:
            raise ValueError(f"{arcname} added twice to {self.filename}")
        self._files[arcname] = (data, executable)

    def add_file(self, arcname: str, path: Path) -> None:
        self.add(arcname, path.read_bytes(), executable=os.access(path, os.X_OK))

    def names(self) -> list[str]:
        return sorted(self._files)

    def write(
        self,
        out_dir: Path,
        *,
        metadata: bytes,
        root_is_purelib: bool,
        extra_dist_info: Mapping[str, bytes] = {},
    ) -> Path:
        """Write the wheel into ``out_dir`` atomically and return its path."""
        wheel_file = (
            "Wheel-Version: 1.0\n"
            "Generator: torch-c-dlpack-ext build_backend\n"
            f"Root-Is-Purelib: {'true' if root_is_purelib else 'false'}\n"
            + "".join(f"Tag: {t}\n" for t in _wheel_file_tags(self.tag))
        ).encode()
        files = dict(self._files)
        files[f"{self.dist_info}/METADATA"] = (metadata, False)
        files[f"{self.dist_info}/WHEEL"] = (wheel_file, False)
        for name, data in extra_dist_info.items():
            files[f"{self.dist_info}/{name}"] = (data, False)
        record_name = f"{self.dist_info}/RECORD"
        ordered = sorted(files)
        record = (
            "".join(
                f"{name},sha256={_urlsafe_digest(files[name][0])},{len(files[name][0])}\n"
                for name in ordered
            )
            + f"{record_name},,\n"
        )
        out_dir.mkdir(parents=True, exist_ok=True)
        target = out_dir / self.filename
        fd, tmp = tempfile.mkstemp(prefix=f".{self.filename}.", suffix=".tmp", dir=out_dir)
        os.close(fd)
        try:
            with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as archive:
                stamp = _zip_time()
                for name in [*ordered, record_name]:
                    data, executable = (
                        files[name] if name != record_name else (record.encode(), False)
                    )
                    info = zipfile.ZipInfo(name, date_time=stamp)
                    info.compress_type = zipfile.ZIP_DEFLATED
                    info.external_attr = ((0o755 if executable else 0o644) | 0o100000) << 16
                    info.create_system = 3
                    archive.writestr(info, data)
            # mkstemp creates 0600; a published file is world-readable.
            os.chmod(tmp, 0o644)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return target


def _wheel_file_tags(tag: str) -> list[str]:
    """The ``Tag:`` lines of a wheel's WHEEL file: each tag of the compressed tag set
    (``cp39-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64`` is two), expanded by
    :func:`packaging.tags.parse_tag`, sorted so the file's bytes are reproducible."""
    from packaging.tags import parse_tag

    return sorted(str(one) for one in parse_tag(tag))


def platform_tag() -> str:
    """This host's platform tag before any policy tag (``linux_x86_64``, ``win_amd64``)."""
    from _torch_c_dlpack_ext_core.naming import host_platform_tag

    return host_platform_tag()


def wheel_tag(*, python: str | None, platform: str | None) -> str:
    """The wheel tag, computed with :mod:`packaging.tags`.

    ``python=None``: ``py3-none-any`` (no library). Otherwise the libraries' manifest
    ``python`` (:func:`~_torch_c_dlpack_ext_core.naming.python_target_tags`): ``abi3``
    -> ``cp39-abi3`` (the limited API: every CPython >= 3.9 with the GIL), ``3.14t`` ->
    ``cp314-cp314t`` (that free-threaded CPython), ``3.11`` (a manifest from before
    abi3) -> ``cp311-cp311``. ``platform``: default this host's.
    """
    from packaging import tags

    from _torch_c_dlpack_ext_core.naming import parse_python_target, python_target_tags

    if python is None:
        return str(
            next(
                iter(
                    tags.compatible_tags(python_version=(3,), interpreter="py3", platforms=["any"])
                )
            )
        )
    major, minor, _ = parse_python_target(python)
    _, abi = python_target_tags(python)
    plat = platform or platform_tag()
    first = next(
        iter(tags.cpython_tags(python_version=(major, minor), abis=[abi], platforms=[plat]))
    )
    return str(first)


def package_files() -> list[tuple[str, Path]]:
    """``(arcname, path)`` of the Python files of the package and of the building blocks
    installed beside it (never libraries or caches)."""
    found = []
    for directory in (PACKAGE_DIR, CORE_DIR):
        for path in sorted(directory.rglob("*")):
            rel = path.relative_to(directory)
            if not path.is_file() or "__pycache__" in rel.parts or rel.parts[0] in ("libs", "csrc"):
                continue
            if path.suffix in _PACKAGE_SUFFIXES:
                found.append((f"{directory.name}/{rel.as_posix()}", path))
    return found


def source_files() -> list[tuple[str, Path]]:
    """``(arcname, path)`` of ``csrc/`` as the installed package carries it (for the JIT)."""
    csrc = ROOT / "csrc"
    return [
        (f"torch_c_dlpack_ext/csrc/{p.relative_to(csrc).as_posix()}", p)
        for p in sorted(csrc.rglob("*"))
        if p.is_file() and p.suffix in _CSRC_SUFFIXES
    ]


def _find_torch(explicit: Path | None) -> Path:
    """The torch to compile against: ``explicit``, else the one importable here (not imported)."""
    import importlib.util

    from _torch_c_dlpack_ext_core.errors import TorchInstallError

    if explicit is not None:
        return explicit
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        raise TorchInstallError(
            "building torch-c-dlpack-ext from source compiles it against the torch in the build "
            "environment, and there is none. Install torch first, then build without isolation: "
            "'pip install torch==<your version>' and 'pip install --no-build-isolation "
            "torch-c-dlpack-ext' (or pass -C torch=<path of a torch installation>)"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def build_wheel_impl(
    wheel_directory: str, options: BackendOptions, *, editable: bool = False
) -> str:
    """PEP 517 ``build_wheel``: see :mod:`build_backend._options` for what gets packed."""
    from _torch_c_dlpack_ext_core.files import load_manifest

    from ._metadata import project_metadata

    meta = project_metadata(ROOT)
    libraries: list[tuple[ManifestEntry, Path]] = []
    if options.libs_dir is not None:
        from _torch_c_dlpack_ext_core.naming import MANIFEST_NAME

        entries = load_manifest(options.libs_dir / MANIFEST_NAME)
        libraries = [(e, options.libs_dir / e.file) for e in entries]
    elif not options.universal and not editable:
        from _torch_c_dlpack_ext_core.driver import BuildRequest, compile_library
        from _torch_c_dlpack_ext_core.torchinstall import TorchInstall

        install = TorchInstall.from_path(_find_torch(options.torch))
        out = options.build_dir if options.build_dir.is_absolute() else ROOT / options.build_dir
        backends = _backends(options.backends, install)
        _check_gpu_headers(backends, install)
        _check_build_dir(out)
        for backend in backends:
            entry = compile_library(BuildRequest(torch=install, backend=backend, output_dir=out))
            libraries.append((entry, out / entry.file))
        libraries += _portable_library(out)
    # PEP 517: the hook returns the basename of the wheel it wrote.
    return assemble_wheel(
        Path(wheel_directory),
        meta=meta,
        libraries=libraries,
        label=options.variant_label,
        editable=editable,
    ).name


def _portable_library(out: Path) -> list[tuple[ManifestEntry, Path]]:
    """The portable table for a source build, beside the native libraries: it serves the
    torches no native library of the wheel does (another torch installed later, a GPU
    torch on a CPU-only build). Built where a C compiler exists (the native build needed
    a C++ one); without one the wheel holds the native libraries alone, and says so."""
    import sys

    from _torch_c_dlpack_ext_core.driver import (
        PortableRequest,
        compile_portable_library,
    )
    from _torch_c_dlpack_ext_core.errors import CompilerNotFoundError

    try:
        entry = compile_portable_library(PortableRequest(output_dir=out))
    except CompilerNotFoundError as exc:
        print(f"torch-c-dlpack-ext: no portable table in this wheel: {exc}", file=sys.stderr)
        return []
    return [(entry, out / entry.file)]


def _backends(requested: Sequence[str], install: TorchInstall) -> list[Backend]:
    """The backends to compile: ``requested`` (validated), else all the torch has (CPU first)."""
    from _torch_c_dlpack_ext_core.errors import BackendUnavailableError
    from _torch_c_dlpack_ext_core.naming import Backend, parse_backend

    available = sorted(install.backends_available, key=lambda b: b is not Backend.CPU)
    if not requested:
        return available
    chosen = [parse_backend(name) for name in requested]
    missing = [b.value for b in chosen if b not in install.backends_available]
    if missing:
        raise BackendUnavailableError(
            f"backends={','.join(requested)}: torch {install.version} at {install.root} has no "
            f"{', '.join(missing)} support; choose from {', '.join(b.value for b in available)}"
        )
    return chosen


def _check_gpu_headers(backends: Sequence[Backend], install: TorchInstall) -> None:
    """Before anything is compiled: every GPU backend to build has its headers.

    A CUDA or ROCm torch loads the library of its own backend (the import chooses by
    the build flavour), so a wheel without it would do nothing there: a missing
    toolkit fails the build, with what to install, instead of quietly giving a CPU-only
    wheel. Building the CPU library alone is a choice: ``backends=cpu``.
    """
    from _torch_c_dlpack_ext_core.errors import GPUHeadersNotFoundError
    from _torch_c_dlpack_ext_core.headers import find_gpu_toolkit
    from _torch_c_dlpack_ext_core.naming import ENV_PREFIX, Backend

    for backend in backends:
        if backend is Backend.CPU:
            continue
        try:
            find_gpu_toolkit(backend, install)
        except GPUHeadersNotFoundError as exc:
            kind = backend.value.upper() if backend is Backend.CUDA else "ROCm"
            raise GPUHeadersNotFoundError(
                f"torch {install.version} at {install.root} is a {kind} build, so the "
                f"library it loads is the {kind} one (a CPU-only wheel would do nothing "
                f"for it), and that needs the {kind} headers: {exc}. To build the CPU "
                f"library alone on purpose: -C backends=cpu (or {ENV_PREFIX}BACKENDS=cpu)"
            ) from None


def _check_build_dir(out: Path) -> None:
    """Before anything is compiled: ``out`` (the ``build-dir`` setting, by default inside
    the source tree) can be created and written. A read-only source tree (a mounted
    checkout, a package manager's store) otherwise fails deep in the compiler driver with
    an ``OSError`` traceback; here it is one line naming the directory and the setting."""
    from _torch_c_dlpack_ext_core.errors import BuildError
    from _torch_c_dlpack_ext_core.naming import ENV_PREFIX

    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        inside = out.resolve().is_relative_to(ROOT.resolve())
        where = " (inside the source tree)" if inside else ""
        raise BuildError(
            f"cannot write the build directory {out}{where}: {exc.strerror or exc}. The "
            f"compiled libraries are kept there between builds; pass -C build-dir=<a "
            f"writable directory> (or set {ENV_PREFIX}BUILD_DIR)"
        ) from None


def wheel_python(entries: Sequence[ManifestEntry]) -> str:
    """The one ``python`` (``abi3``, ``3.14t``) the libraries ``entries`` serve (their
    manifest's ``python``): a wheel's Python tags. Raises :class:`BuildError` when they
    disagree (a libs dir mixing abi3 and free-threaded builds)."""
    from _torch_c_dlpack_ext_core.errors import BuildError

    # "abi3.12" (the portable table's limited API of 3.12, loaded only on >= 3.12) rides
    # in the abi3 wheel beside the abi3 libraries: the wheel's tags are abi3's.
    pythons = sorted(
        {"abi3" if entry.python.startswith("abi3") else entry.python for entry in entries}
    )
    if len(pythons) != 1:
        listed = ", ".join(f"{e.file}: Python {e.python}" for e in entries)
        raise BuildError(
            f"one wheel holds libraries of one Python ABI, and these were compiled for "
            f"{' and '.join(pythons) or 'none'} ({listed}); pack the abi3 libraries and "
            "each free-threaded Python's from their own libs dir"
        )
    return str(pythons[0])


def assemble_wheel(
    out_dir: Path,
    *,
    meta: ProjectMetadata,
    libraries: Sequence[tuple[ManifestEntry, Path]],
    label: str | None = None,
    variant_json: bytes | None = None,
    editable: bool = False,
    platform: str | None = None,
) -> Path:
    """Write one wheel: the package, csrc/, the libraries and their manifest.

    No libraries: a ``py3-none-any`` wheel; else a CPython wheel tagged for the Python
    ABI the libraries' manifest entries name (:func:`wheel_python`, :func:`wheel_tag`). ``label`` +
    ``variant_json``: a PEP 825 variant wheel. ``editable``: a ``.pth`` pointing at
    the source tree.
    """

    from _torch_c_dlpack_ext_core.errors import BuildError, ConfigError
    from _torch_c_dlpack_ext_core.manifest import dump_manifest
    from _torch_c_dlpack_ext_core.naming import LIBS_DIR, MANIFEST_NAME

    if label is not None:
        from ._options import check_variant_label

        check_variant_label(label)
        if not libraries:
            raise ConfigError(f"variant-label {label!r} needs libraries to pack (libs-dir=)")
    platforms = {entry.platform for entry, _ in libraries}
    if len(platforms) > 1:
        raise BuildError(
            f"one wheel cannot hold libraries of several platforms: {sorted(platforms)}"
        )
    tag = wheel_tag(
        python=wheel_python([entry for entry, _ in libraries]) if libraries else None,
        platform=platform or (next(iter(platforms)) if platforms else None),
    )
    writer = WheelWriter(name=meta.name, version=meta.version, tag=tag, label=label)
    if editable:
        writer.add(f"_{meta.name}_editable.pth", (str(ROOT / "python") + "\n").encode())
    else:
        for arcname, path in [*package_files(), *source_files()]:
            writer.add_file(arcname, path)
    entries = []
    for entry, path in sorted(libraries, key=lambda item: item[0].file):
        arcname = f"{LIBS_DIR}/{Path(entry.file).name}"
        writer.add(f"torch_c_dlpack_ext/{arcname}", path.read_bytes(), executable=True)
        entries.append(entry._replace(file=arcname))
    if not editable or entries:
        writer.add(f"torch_c_dlpack_ext/{MANIFEST_NAME}", dump_manifest(entries))
    extra: dict[str, bytes] = {}
    for license_path in meta.license_files():
        extra[f"licenses/{license_path.relative_to(meta.root).as_posix()}"] = (
            license_path.read_bytes()
        )
    if variant_json is not None:
        extra["variant.json"] = variant_json
    return writer.write(
        out_dir, metadata=meta.metadata_bytes(), root_is_purelib=not entries, extra_dist_info=extra
    )


def wheel_requirements(options: BackendOptions) -> list[str]:
    """Build requirements beyond ``[build-system] requires``: none, whatever ``options``
    say (the backend only packs; the torch a source build compiles against is already in
    the build environment). The hook has read the settings, so a bad one failed first."""
    del options
    return []


def build_editable_impl(wheel_directory: str, options: BackendOptions) -> str:
    """PEP 660 ``build_editable``: the package from the source tree, no library (JIT/explain)."""
    return build_wheel_impl(wheel_directory, options, editable=True)


def metadata_impl(metadata_directory: str) -> str:
    """PEP 517 ``prepare_metadata_for_build_wheel``: METADATA and WHEEL-less dist-info."""
    from ._metadata import project_metadata

    meta = project_metadata(ROOT)
    target = Path(metadata_directory) / meta.dist_info
    target.mkdir(parents=True, exist_ok=True)
    (target / "METADATA").write_bytes(meta.metadata_bytes())
    return meta.dist_info
