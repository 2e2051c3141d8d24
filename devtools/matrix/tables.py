"""``matrix.toml``'s tables as typed records: the platforms, the torch minors and the
torch wheel flavours built against, and which free-threaded Pythons the release builds.

Plain data: :mod:`devtools.matrix.reader` validates the file into these records,
:mod:`devtools.matrix.cells` makes cells of them and :mod:`devtools.matrix.model` derives the
cells and CI's jobs.
"""

from __future__ import annotations

import dataclasses
import sys
import sysconfig
from collections.abc import Mapping

from _torch_c_dlpack_ext_core.naming import Backend

__all__ = [
    "OS_OF_PLATFORM",
    "FreeThreaded",
    "Platform",
    "TorchMinor",
    "TorchWheel",
    "host_os",
    "python_sort_key",
    "python_within",
    "running_python",
]


#: ``sys.platform`` -> the OS name matrix.toml's platforms use.
OS_OF_PLATFORM: Mapping[str, str] = {"linux": "linux", "win32": "windows", "darwin": "macos"}


def host_os(platform: str | None = None) -> str | None:
    """matrix.toml's OS name for ``platform`` (``sys.platform`` spelling; default: this
    process's, read at the call), or ``None``."""
    return OS_OF_PLATFORM.get(sys.platform if platform is None else platform)


def running_python() -> str:
    """``3.12``, or ``3.14t`` when this CPython is free-threaded."""
    free = "t" if sysconfig.get_config_var("Py_GIL_DISABLED") else ""
    return f"{sys.version_info[0]}.{sys.version_info[1]}{free}"


def python_sort_key(python: str) -> tuple[int, ...]:
    """``"3.14t"`` -> ``(3, 14)``: orders CPython versions (validated ones: see
    :mod:`devtools.matrix.reader`), a free-threaded one like its GIL twin."""
    return tuple(int(part) for part in python.removesuffix("t").split("."))


def python_within(python: str, requires_python: str | None) -> bool:
    """``python`` (``"3.11"``, ``"3.14t"``: a free-threaded one as its GIL twin) is inside
    the specifier ``requires_python`` (``None``: no bound)."""
    if requires_python is None:
        return True
    from packaging.specifiers import SpecifierSet

    return SpecifierSet(requires_python).contains(f"{python.removesuffix('t')}.0")


@dataclasses.dataclass(frozen=True)
class Platform:
    """A wheel platform the matrix builds for (``linux_x86_64``...)."""

    name: str
    os: str
    #: ``platform.machine()`` on that platform (``x86_64``, ``AMD64``, ``arm64``).
    machine: str
    runner: str
    cibw_platform: str
    cibw_arch: str
    #: manylinux image cibuildwheel builds in (Linux only).
    image: str | None

    @property
    def dual_abi(self) -> bool:
        """libstdc++'s dual ABI applies (Linux): library names and cells carry it."""
        return self.os == "linux"

    @property
    def sys_platform(self) -> str:
        """The ``sys.platform`` of this platform's interpreters (``linux``, ``win32``)."""
        return next(name for name, os_name in OS_OF_PLATFORM.items() if os_name == self.os)


@dataclasses.dataclass(frozen=True)
class TorchWheel:
    """One torch wheel flavour we compile against (an index, a backend, an ABI per platform)."""

    index: str
    index_url: str
    backend: Backend
    #: CUDA / ROCm version of that torch build (``None`` for CPU builds).
    toolkit: str | None
    #: Extra requirements supplying GPU headers at build time.
    toolkit_requirements: tuple[str, ...]
    platforms: tuple[str, ...]
    cxx11_abi: Mapping[str, bool]
    #: The flavour's index ships the torch minor's free-threaded wheels (checked for
    #: PyPI; ``freethreaded = false`` where that was not verified).
    freethreaded: bool = True


@dataclasses.dataclass(frozen=True)
class FreeThreaded:
    """``[freethreaded."3.13t"]``: whether the release workflow builds this Python's cells."""

    python: str
    #: The release has jobs for it (``False``: ``nox -s build`` builds its cells, CI not).
    release: bool
    #: Why not (required when ``release`` is false).
    reason: str = ""


@dataclasses.dataclass(frozen=True)
class TorchMinor:
    """A torch minor version and the release built against."""

    minor: str
    release: str
    #: The CPythons with the GIL torch publishes wheels of (oldest first): the abi3
    #: cells' floor and verify's oldest and newest.
    python: tuple[str, ...]
    python_exclude: Mapping[str, tuple[str, ...]]
    wheels: tuple[TorchWheel, ...]
    #: The free-threaded CPythons torch publishes wheels of (``3.13t``).
    freethreaded: tuple[str, ...] = ()

    @property
    def version(self) -> tuple[int, int]:
        major, minor = self.minor.split(".")
        return int(major), int(minor)

    def pythons_for(self, platform: str) -> tuple[str, ...]:
        """The CPython versions (with the GIL) torch publishes wheels of on ``platform``."""
        excluded = self.python_exclude.get(platform, ())
        return tuple(p for p in self.python if p not in excluded)

    def freethreaded_for(self, platform: str) -> tuple[str, ...]:
        """The free-threaded CPythons torch publishes wheels of on ``platform``."""
        excluded = self.python_exclude.get(platform, ())
        return tuple(p for p in self.freethreaded if p not in excluded)
