"""The ONE definition of names shared by the build, the wheels and the runtime: library file
names and suffixes, the manifest's location, variant labels, the two environment variable
prefixes (``TORCH_C_DLPACK_EXT_`` for users, ``TCDE_`` for the developer tools and the
tests), the platform-to-toolchain map and the cache directory.

Library file names, the manifest location, variant labels, the environment
variable prefix and the cache directory are all derived here. Build code, CI
helpers and the runtime selector import these functions instead of rebuilding
strings of their own, so the copies cannot drift apart.
"""

from __future__ import annotations

import enum
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

__all__ = [
    "ABI3",
    "ABI3_FLOOR",
    "ANY",
    "CAPSULE_ATTR",
    "CAPSULE_NAME",
    "CORE_PACKAGE",
    "DEV_ENV_PREFIX",
    "DIST_NAME",
    "ENV_PREFIX",
    "LEGACY_INT_ATTR",
    "LIBS_DIR",
    "LIMITED_API_VERSION",
    "MANIFEST_NAME",
    "NATIVE_BACKENDS",
    "PACKAGE",
    "PLATFORM_TOOLCHAINS",
    "PORTABLE",
    "PORTABLE_STEM",
    "SHARED_LIBRARY_NAMING",
    "SOURCE_SUFFIXES",
    "TORCH_RANGE",
    "Backend",
    "UserCacheDir",
    "env_var",
    "free_threaded_build",
    "host_platform_tag",
    "library_filename",
    "parse_backend",
    "parse_python_target",
    "portable_library_filename",
    "python_serves",
    "python_tag",
    "python_target_tags",
    "running_python",
    "running_python_target",
    "shared_library_suffix",
    "toolchain_name",
    "torch_minor",
    "user_cache_dir",
    "variant_label",
]

#: Distribution name on the index.
DIST_NAME = "torch-c-dlpack-ext"
#: Import package name (the public face: importing it runs the selector).
PACKAGE = "torch_c_dlpack_ext"
#: The shipped building blocks, a private top-level package installed beside it.
CORE_PACKAGE = "_torch_c_dlpack_ext_core"
#: Manifest file name, relative to the package directory.
MANIFEST_NAME = "manifest.json"
#: Folder inside the package that holds the bundled libraries.
LIBS_DIR = "libs"
#: The one prefix of every environment variable a user sets (the runtime's and the build
#: backend's settings).
ENV_PREFIX = "TORCH_C_DLPACK_EXT_"
#: The prefix of the developer tools' and the tests' own variables (``TCDE_DEV_CACHE``,
#: ``TCDE_TEST_LIBRARY``): never read by shipped code, so never reported as typos at import.
DEV_ENV_PREFIX = "TCDE_"
#: The attribute torch 2.10+ sets on ``torch.Tensor`` (a PyCapsule), and the one we publish.
CAPSULE_ATTR = "__dlpack_c_exchange_api__"
#: The PyCapsule name of an exchange table (the DLPack spec's; the mirrors in
#: ``dlpack_ctypes``, which import only ctypes, spell it too and a test keeps them equal).
CAPSULE_NAME = b"dlpack_exchange_api"
#: The legacy int attribute (torch main for a few weeks; read by tvm-ffi 0.1.0-0.1.3).
LEGACY_INT_ATTR = "__c_dlpack_exchange_api__"
#: The torch minors this version builds for, oldest and newest: the THPVariable layouts
#: the driver checks (``torchchecks.THPVARIABLE_HEADS``, a unit test keeps the two equal).
#: 2.4-2.9 need the library; 2.10 and later provide the API themselves.
TORCH_RANGE = ((2, 4), (2, 15))
#: The files of ``csrc/`` a build reads: the driver hashes them into its cache key and
#: the wheel and sdist ship them (``.c``: the portable table, ``csrc/portable/``).
SOURCE_SUFFIXES = (".cc", ".cpp", ".h", ".hpp", ".inc", ".map", ".c")
#: A build target -> the name of the toolchain that builds for it (the keys of
#: :data:`_torch_c_dlpack_ext_core.toolchains.TOOLCHAINS`). A target is ``sys.platform``
#: (a native build: the host's compiler makes the host's code), or the wheel platform tag
#: of a cross target (``linux_aarch64``: Debian's ``aarch64-linux-gnu-g++`` makes aarch64
#: code on any Linux host). No other target is supported.
PLATFORM_TOOLCHAINS = {
    "linux": "gnu",
    "darwin": "darwin",
    "win32": "msvc",
    "linux_aarch64": "gnu-aarch64",
}
#: Per toolchain: ``(file prefix, suffix)`` of a shared library. The toolchains read it
#: from here, so file names are defined once for the build, the wheels and the runtime.
SHARED_LIBRARY_NAMING = {
    "gnu": ("lib", ".so"),
    "darwin": ("lib", ".dylib"),
    "msvc": ("", ".dll"),
    "gnu-aarch64": ("lib", ".so"),
}


#: The ``python`` of a library built with the limited C API (``Py_LIMITED_API`` =
#: :data:`LIMITED_API_VERSION`): one build serves every CPython with the GIL from
#: :data:`ABI3_FLOOR` on. Free-threaded CPython has another object header and cannot
#: use it, so its libraries say ``"3.14t"`` (that interpreter only); manifests written
#: before abi3 say ``"3.11"`` (that CPython with the GIL only).
ABI3 = "abi3"
#: The oldest CPython the abi3 libraries serve (the project's ``requires-python`` floor).
ABI3_FLOOR = (3, 9)
#: ``Py_LIMITED_API``: the stable ABI as of :data:`ABI3_FLOOR` (``0x03090000``).
LIMITED_API_VERSION = (ABI3_FLOOR[0] << 24) | (ABI3_FLOOR[1] << 16)


def parse_python_target(value: str) -> tuple[int, int, str]:
    """``(major, minor, kind)`` of a library's ``python``: kind ``"abi3"`` (``"abi3"``:
    every GIL CPython from :data:`ABI3_FLOOR`; ``"abi3.12"``: the limited API of a later
    CPython, every GIL CPython from it on), ``"freethreaded"`` (``"3.14t"``) or
    ``"cpython"`` (``"3.11"``, written before abi3: that GIL CPython only).

    Raises :class:`~_torch_c_dlpack_ext_core.errors.ConfigError` for anything else.
    """
    if value == ABI3:
        return ABI3_FLOOR[0], ABI3_FLOOR[1], "abi3"
    minor_text = value[len(ABI3) + 1 :] if value.startswith(ABI3 + ".") else ""
    # "abi3.12": the limited API of CPython 3.12 (vectorcall), every GIL CPython >= 3.12.
    is_minor = minor_text.isascii() and minor_text.isdigit() and len(minor_text) <= 2
    if is_minor and (3, int(minor_text)) > ABI3_FLOOR:
        return 3, int(minor_text), "abi3"
    text, kind = (value[:-1], "freethreaded") if value.endswith("t") else (value, "cpython")
    major, dot, minor = text.partition(".")
    if (
        not (dot and major.isascii() and major.isdigit() and minor.isascii() and minor.isdigit())
        or len(text) > 9
    ):
        from .errors import ConfigError, brief

        raise ConfigError(
            f"not a library's python: {brief(value)} (expected 'abi3', '3.14t' or '3.11')"
        )
    return int(major), int(minor), kind


def free_threaded_build() -> bool:
    """Whether the running CPython was *built* free-threaded (``Py_GIL_DISABLED``).

    The ONE place a Python ABI is read from the interpreter: the object header a compiled
    library must match is fixed when CPython is built, whatever its GIL does at run time.
    A 3.13t started with ``PYTHON_GIL=1`` (or ``-X gil=1``) has the GIL enabled
    (``sys._is_gil_enabled()`` is True) but still the free-threaded ABI: a library for
    cp313 crashes it.
    """
    import sysconfig  # not on the import's common path

    return bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


def running_python_target() -> str:
    """The ``python`` a library must say to serve this interpreter: :data:`ABI3` for a
    CPython with the GIL, ``"3.14t"`` for a free-threaded build (:func:`free_threaded_build`)."""
    if free_threaded_build():
        return f"{sys.version_info[0]}.{sys.version_info[1]}t"
    return ABI3


def python_tag() -> str:
    """``cp311`` / ``cp314t``: this interpreter and its ABI, as wheel tags spell them (the
    ``t`` from :func:`free_threaded_build`, never from the runtime GIL state)."""
    names = {"cpython": "cp", "pypy": "pp"}
    name = names.get(sys.implementation.name, sys.implementation.name)
    suffix = "t" if free_threaded_build() else ""
    return f"{name}{sys.version_info[0]}{sys.version_info[1]}{suffix}"


def python_target_tags(value: str) -> tuple[str, str]:
    """The wheel's ``(interpreter, abi)`` tags for libraries whose ``python`` is ``value``:
    ``abi3`` -> ``("cp39", "abi3")``, ``abi3.12`` -> ``("cp312", "abi3")``,
    ``3.14t`` -> ``("cp314", "cp314t")``, ``3.11`` -> ``("cp311", "cp311")``."""
    major, minor, kind = parse_python_target(value)
    interpreter = f"cp{major}{minor}"
    if kind == "abi3":
        return interpreter, ABI3
    return interpreter, interpreter + ("t" if kind == "freethreaded" else "")


class Backend(str, enum.Enum):
    """The device backends of torch builds: those a native library is built for
    (:data:`NATIVE_BACKENDS`), and XPU (``torch.version.xpu``), which no native library
    serves (the portable table does)."""

    CPU = "cpu"
    CUDA = "cuda"
    ROCM = "rocm"
    XPU = "xpu"

    def __str__(self) -> str:
        return self.value


#: The backends a native library is built for (the matrix's, the manifest's).
NATIVE_BACKENDS = (Backend.CPU, Backend.CUDA, Backend.ROCM)


def parse_backend(value: str | Backend) -> Backend:
    """Return the :class:`Backend` named by ``value`` (case-insensitive).

    Raises :class:`~_torch_c_dlpack_ext_core.errors.InvalidBackendError` naming the
    accepted values.
    """
    from .errors import InvalidBackendError

    if isinstance(value, Backend):
        return value
    try:
        return Backend(value.strip().lower())
    except ValueError:
        choices = ", ".join(b.value for b in Backend)
        raise InvalidBackendError(f"unknown backend {value!r}: expected one of {choices}") from None


def torch_minor(version: str) -> tuple[int, int]:
    """``(major, minor)`` of a torch version string such as ``2.8.0a0+abc`` or ``2.6.0+cu124``."""
    # String methods, not a regular expression: compiling one would cost every
    # ``import torch_c_dlpack_ext`` ~0.1 ms (this module is on both import paths).
    major, dot, rest = version.lstrip().partition(".")
    end = 0
    while end < len(rest) and rest[end].isdecimal():
        end += 1
    # int() refuses more than 4300 digits (ValueError); no real version has 10.
    if not (dot and major.isdecimal() and 0 < end <= 9 and len(major) <= 9):
        from .errors import ConfigError, brief

        raise ConfigError(f"not a torch version: {brief(version)} (expected e.g. '2.6.0')")
    return int(major), int(rest[:end])


#: What a torch-agnostic manifest entry says in its ``torch``, ``torch_build`` and
#: ``backend`` (the portable library: built against no torch, it serves every torch
#: that has ``torch._C._to_dlpack``). Only the three together, with ``cxx11_abi`` and
#: ``gpu_toolkit`` null, make such an entry.
ANY = "any"
#: The ``table`` a portable library's build info names, and how messages call it.
PORTABLE = "portable"
#: The portable library's file stem (no torch, no backend, no ABI in it).
PORTABLE_STEM = "torch_c_dlpack_ext-portable"


def portable_library_filename(python: str = ABI3, *, platform: str | None = None) -> str:
    """File name of the portable library for a Python ABI: ``abi3`` ->
    ``libtorch_c_dlpack_ext-portable.so``, ``abi3.12`` -> ``...-portable-abi3.12.so``,
    ``3.14t`` -> ``...-portable-cp314t.so`` (one combined wheel holds one Python ABI's
    libraries, but the JIT cache and the build folders keep several side by side)."""
    major, minor, kind = parse_python_target(python)
    prefix, suffix = SHARED_LIBRARY_NAMING[toolchain_name(platform)]
    if python == ABI3:
        part = ""
    elif kind == "abi3":
        part = f"-abi3.{minor}"
    else:
        part = f"-cp{major}{minor}{'t' if kind == 'freethreaded' else ''}"
    return f"{prefix}{PORTABLE_STEM}{part}{suffix}"


def python_serves(value: str, version: tuple[int, int], freethreaded: bool) -> bool:
    """Whether a library whose ``python`` is ``value`` may be loaded by a CPython
    ``version`` (``(3, 12)``) that is (``freethreaded``) or is not a free-threaded build:
    ``abi3`` every GIL CPython >= 3.9, ``abi3.12`` every GIL CPython >= 3.12, ``3.14t``
    the free-threaded 3.14 only, ``3.11`` the GIL 3.11 only. A value that is not a
    library's python serves nothing. (``_loader.python_serves`` restates it; a unit test
    pins the two.)"""
    try:
        major, minor, kind = parse_python_target(value)
    except Exception:  # ConfigError: not a library's python
        return False
    if kind == "abi3":
        return not freethreaded and version >= (major, minor)
    return version == (major, minor) and freethreaded == (kind == "freethreaded")


def running_python() -> tuple[tuple[int, int], bool]:
    """``((major, minor), freethreaded)`` of this interpreter, the latter from how it was
    built (``sysconfig``'s ``Py_GIL_DISABLED``), never from whether the GIL is enabled
    now (``PYTHON_GIL=1`` turns it back on in a free-threaded build, whose object layout
    stays that of the free-threaded ABI): :func:`free_threaded_build`."""
    return sys.version_info[:2], free_threaded_build()


def toolchain_name(platform: str | None = None) -> str:
    """The toolchain that builds for ``platform`` (as ``sys.platform`` spells it, default
    this one; or a cross target of :data:`PLATFORM_TOOLCHAINS`): ``gnu``, ``darwin``,
    ``msvc`` or ``gnu-aarch64``.

    Raises :class:`~_torch_c_dlpack_ext_core.errors.ConfigError` for any other platform.
    """
    platform = sys.platform if platform is None else platform
    name = PLATFORM_TOOLCHAINS.get(platform)
    if name is None:
        from .errors import ConfigError, brief

        known = ", ".join(PLATFORM_TOOLCHAINS)
        raise ConfigError(
            f"unsupported platform {brief(platform)}: torch-c-dlpack-ext builds and names "
            f"libraries for {known} (sys.platform spellings, or a cross target's wheel "
            "platform tag)"
        )
    return name


def shared_library_suffix(platform: str | None = None) -> str:
    """File suffix of a shared library on ``platform`` (default: this one)."""
    return SHARED_LIBRARY_NAMING[toolchain_name(platform)][1]


def host_platform_tag() -> str:
    """This host's wheel platform tag before any policy tag (``linux_x86_64``,
    ``win_amd64``, ``macosx_14_0_arm64``): sysconfig's platform, normalised the way
    :mod:`packaging.tags` normalises it."""
    import sysconfig

    return sysconfig.get_platform().replace("-", "_").replace(".", "_")


def library_filename(
    major: int,
    minor: int,
    backend: Backend | str,
    cxx11_abi: bool | None,
    *,
    platform: str | None = None,
) -> str:
    """File name of the exchange library for one build cell.

    ``cxx11_abi`` is ``None`` on platforms without a libstdc++ dual ABI (Windows,
    macOS); the name then carries no ABI part.
    """
    backend = parse_backend(backend)
    abi = "" if cxx11_abi is None else f"-cxx11abi{int(cxx11_abi)}"
    prefix, suffix = SHARED_LIBRARY_NAMING[toolchain_name(platform)]
    return f"{prefix}torch_c_dlpack_ext-torch{major}.{minor}-{backend.value}{abi}{suffix}"


def variant_label(
    major: int, minor: int, backend: Backend | str, cxx11_abi: bool | None, *, with_abi: bool
) -> str:
    """PEP 825 variant label of a cell: ``t26_cuda``, or ``t26_cuda_abi0`` when the
    torch minor ships with both C++ ABIs and the label must tell them apart."""
    backend = parse_backend(backend)
    label = f"t{major}{minor}_{backend.value}"
    if with_abi and cxx11_abi is not None:
        label += f"_abi{int(cxx11_abi)}"
    return label


def env_var(name: str) -> str:
    """Full name of one of this project's environment variables.

    ``env_var("JIT")`` is ``TORCH_C_DLPACK_EXT_JIT``.
    """
    return ENV_PREFIX + name


#: The user cache directory per ``sys.platform``: ``(variable naming it, default under the
#: home directory)``; XDG's elsewhere. macOS has no variable for it.
_USER_CACHE = {
    "win32": ("LOCALAPPDATA", ("AppData", "Local")),
    "darwin": ("", ("Library", "Caches")),
}
_XDG_CACHE = ("XDG_CACHE_HOME", (".cache",))


class UserCacheDir(NamedTuple):
    """Where JIT-built libraries go by default, and the variable that said so."""

    path: Path
    #: ``XDG_CACHE_HOME`` / ``LOCALAPPDATA`` when it was honoured; ``None``: the default
    #: under the home directory.
    variable: str | None


def user_cache_dir(
    environ: Mapping[str, str] | None = None, platform: str | None = None
) -> UserCacheDir:
    """The JIT cache directory when ``TORCH_C_DLPACK_EXT_CACHE_DIR`` is not set (that
    variable is a runtime setting, read once by ``torch_c_dlpack_ext._settings``):
    ``<user cache dir>/torch-c-dlpack-ext``.

    The user cache dir is ``$XDG_CACHE_HOME`` (``%LOCALAPPDATA%`` on Windows) when that
    is an absolute path, else ``~/.cache`` (``~\\AppData\\Local``; ``~/Library/Caches`` on
    macOS): the XDG Base Directory spec says an empty or relative value is to be ignored.
    Never relative, so a cache never lands in (and is never loaded from) the current
    directory: raises :class:`~_torch_c_dlpack_ext_core.errors.ConfigError` when the
    home directory is unknown or relative.
    """
    environ = os.environ if environ is None else environ
    variable, under_home = _USER_CACHE.get(
        sys.platform if platform is None else platform, _XDG_CACHE
    )
    value = environ.get(variable, "") if variable else ""
    # ntpath and posixpath agree with the platform's own idea of "absolute" only when
    # asked on that platform; the value is read on the platform it names.
    if value and os.path.isabs(value):
        return UserCacheDir(Path(value) / DIST_NAME, variable)
    try:
        home = Path.home()
    except RuntimeError:  # no HOME and no password database entry
        home = Path()
    if not home.is_absolute():
        from .errors import ConfigError

        raise ConfigError(
            "no user cache directory for JIT builds: the home directory is unknown or "
            f"relative ({str(home)!r}); set {env_var('CACHE_DIR')} to an absolute path"
        )
    return UserCacheDir(home.joinpath(*under_home, DIST_NAME), None)
