"""What this host can build: the matrix platform it is, the interpreter a cell compiles
for, and why a cell is skipped (another platform without a cross toolchain, no ROCm, no
free-threaded CPython, an index that does not answer); :mod:`devtools.build` builds the
rest."""

from __future__ import annotations

import dataclasses
import functools
import os
import platform as host_platform
import sys
import sysconfig
import urllib.error
import urllib.request
from pathlib import Path

from _torch_c_dlpack_ext_core.naming import Backend
from devtools.cells import Cell, PortableCell
from devtools.errors import HANDLED
from devtools.hostenv import host_os
from devtools.matrixmodel import Matrix
from devtools.matrixtables import python_sort_key

__all__ = [
    "Interpreter",
    "cross_target",
    "freethreaded_python",
    "host_platform_name",
    "index_unreachable",
    "portable_skip_reason",
    "running_python",
    "skip_reason",
    "tree_python",
]

#: Seconds to wait for an index before calling it unreachable.
INDEX_TIMEOUT_S = 5.0


def host_platform_name(matrix: Matrix) -> str | None:
    """The matrix platform this host builds for (by OS and machine), or ``None``."""
    system = host_os()
    machine = host_platform.machine()
    for name, plat in matrix.platforms.items():
        if plat.os == system and plat.machine.lower() == machine.lower():
            return name
    return None


_INDEX_CACHE: dict[str, str | None] = {}


def index_unreachable(url: str, timeout: float = INDEX_TIMEOUT_S) -> str | None:
    """``None`` when ``url`` answers within ``timeout``, else why not (cached per run)."""
    if url in _INDEX_CACHE:
        return _INDEX_CACHE[url]
    reason: str | None = None
    probe = url.rstrip("/") + "/torch/"
    try:
        request = urllib.request.Request(probe, method="HEAD")
        with urllib.request.urlopen(request, timeout=timeout):
            pass
    except urllib.error.HTTPError as exc:
        if exc.code >= 500:
            reason = f"index {url} answered HTTP {exc.code}"
    except (urllib.error.URLError, OSError) as exc:
        cause = getattr(exc, "reason", exc)
        reason = f"index {url} unreachable within {timeout:.0f} s ({cause})"
    _INDEX_CACHE[url] = reason
    return reason


def _rocm_missing() -> str | None:
    for var in ("ROCM_PATH", "ROCM_HOME"):
        if os.environ.get(var) and (Path(os.environ[var]) / "include" / "hip").is_dir():
            return None
    if Path("/opt/rocm/include/hip").is_dir():
        return None
    return "no ROCm toolchain (set ROCM_PATH to a ROCm installation with include/hip)"


@dataclasses.dataclass(frozen=True)
class Interpreter:
    """A CPython a cell compiles for: its executable and include dir."""

    executable: Path
    include: Path


def running_python() -> str:
    """``3.12``, or ``3.14t`` when this CPython is free-threaded."""
    free = "t" if sysconfig.get_config_var("Py_GIL_DISABLED") else ""
    return f"{sys.version_info[0]}.{sys.version_info[1]}{free}"


@functools.cache
def freethreaded_python(version: str) -> Interpreter | str:
    """The free-threaded CPython ``version`` (``"3.14t"``) to compile for, or why there
    is none on this host.

    This interpreter, when it is that one; else the developer tools' provisioner
    (``devtools.freethreaded``, which builds it once from Debian's CPython sources and
    caches it), where it exists and can provide it.
    """
    if running_python() == version:
        return Interpreter(Path(sys.executable), Path(sysconfig.get_paths()["include"]))
    import importlib

    try:
        provisioner = importlib.import_module("devtools.freethreaded")
    except ImportError:
        return (
            f"no free-threaded CPython {version} here (run this build with python{version}, "
            "or add the devtools.freethreaded provisioner)"
        )
    try:
        found = provisioner.free_threaded_python(version)
    except HANDLED as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"no free-threaded CPython {version}: {first}"
    return Interpreter(Path(found.executable), Path(found.include_dir))


def tree_python(cell: Cell) -> str:
    """The CPython whose torch wheel an abi3 cell's tree holds: the running one when the
    torch minor supports it (its wheel is then usually in uv's cache already), else the
    newest the torch minor supports on the platform."""
    running = running_python()
    if running in cell.pythons:
        return running
    return max(cell.pythons, key=python_sort_key)


def cross_target(cell: Cell, host: str | None, target: str | None) -> str | None:
    """The cross target ``cell`` is built for (its platform, when ``--platform`` named it
    and it is not the host's: the driver then uses that target's cross toolchain), or
    ``None`` for a native build."""
    name = cell.platform.name
    return name if target == name and name != host else None


def _cross_compiler_missing(target: str) -> str | None:
    from _torch_c_dlpack_ext_core.errors import CompilerNotFoundError
    from _torch_c_dlpack_ext_core.toolchains import toolchain_for

    try:
        toolchain_for(target).find_compiler(None, os.environ)
    except CompilerNotFoundError as exc:
        return str(exc).strip().splitlines()[0]
    return None


def _cross_skip_reason(cell: Cell, host: str | None, cross: str) -> str | None:
    """Why ``cell`` cannot be cross-compiled for ``cross`` here (``None``: it can)."""
    from _torch_c_dlpack_ext_core.naming import PLATFORM_TOOLCHAINS

    if cross not in PLATFORM_TOOLCHAINS:
        return f"builds on {cross}: no cross toolchain for it, this host is {host}"
    if cell.freethreaded:
        return (
            f"a cross build makes abi3 libraries only: a free-threaded cell needs a "
            f"{cell.python} CPython of {cross} (build it on {cross})"
        )
    return _cross_compiler_missing(cross)


def portable_skip_reason(
    cell: PortableCell, host: str | None, target: str | None = None
) -> str | None:
    """Why this host cannot build the portable ``cell`` (``None``: it can): another
    platform without a cross toolchain, a missing free-threaded CPython, an abi3 build on
    a free-threaded CPython. No torch index is needed: it is built against none."""
    from _torch_c_dlpack_ext_core.errors import CompilerNotFoundError
    from _torch_c_dlpack_ext_core.naming import PLATFORM_TOOLCHAINS
    from _torch_c_dlpack_ext_core.toolchains import toolchain_for

    name = cell.platform.name
    cross = name if target == name and name != host else None
    if name != host and cross is None:
        hint = f" (--platform {name} cross-compiles it)" if name in PLATFORM_TOOLCHAINS else ""
        return f"builds on {name}, this host is {host or 'not in matrix.toml'}{hint}"
    if cell.freethreaded:
        found = freethreaded_python(cell.python)
        if isinstance(found, str):
            return found
    elif sysconfig.get_config_var("Py_GIL_DISABLED"):
        return (
            f"an abi3 library compiles against a CPython with the GIL; this is {running_python()}"
        )
    try:
        toolchain_for(cross or sys.platform).find_c_compiler(None, os.environ)
    except CompilerNotFoundError as exc:
        return str(exc).strip().splitlines()[0]
    return None


def skip_reason(cell: Cell, host: str | None, target: str | None = None) -> str | None:
    """Why this host cannot build ``cell`` (``None``: it can). ``target``: the platform
    ``--platform`` chose (a cross target's cells are built with its cross toolchain)."""
    from _torch_c_dlpack_ext_core.naming import PLATFORM_TOOLCHAINS

    name = cell.platform.name
    cross = cross_target(cell, host, target)
    if name != host and cross is None:
        hint = f" (--platform {name} cross-compiles it)" if name in PLATFORM_TOOLCHAINS else ""
        return f"builds on {name}, this host is {host or 'not in matrix.toml'}{hint}"
    if cross is not None:
        reason = _cross_skip_reason(cell, host, cross)
        if reason:
            return reason
    if cell.backend is Backend.ROCM:
        missing = _rocm_missing()
        if missing:
            return missing
    if cell.freethreaded:
        found = freethreaded_python(cell.python)
        if isinstance(found, str):
            return found
    elif sysconfig.get_config_var("Py_GIL_DISABLED"):
        return (
            f"an abi3 library compiles against a CPython with the GIL; this is "
            f"{running_python()} (run the build with such a CPython)"
        )
    return index_unreachable(cell.wheel.index_url)
