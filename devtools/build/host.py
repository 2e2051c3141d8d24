"""What this host can build: the matrix platform it is, the interpreter a cell compiles
for, why a cell is skipped (another platform without a cross toolchain, no ROCm, no
free-threaded CPython, an index that does not answer) and how many cells it compiles at
once (:func:`default_jobs`); :mod:`devtools.build.cellbuild` builds the rest."""

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
from devtools.base.errors import HANDLED
from devtools.matrix.cells import Cell, PortableCell
from devtools.matrix.model import Matrix
from devtools.matrix.tables import host_os, python_sort_key, running_python

__all__ = [
    "Interpreter",
    "cross_target",
    "default_jobs",
    "freethreaded_python",
    "host_platform_name",
    "index_unreachable",
    "jobs_for",
    "portable_skip_reason",
    "running_python",
    "skip_reason",
    "tree_python",
]

#: Seconds to wait for an index before calling it unreachable.
INDEX_TIMEOUT_S = 5.0
#: Memory one cell's compile may take at its peak: a translation unit including torch's
#: headers reaches ~1.4 GB RSS (docs/facts.md, "Cost of a real old torch here"); ours
#: measured 0.5-0.7 GiB (docs/benchmarks.md, "Build cost per cell"). The larger figure, rounded up,
#: so that parallel compiles never push a host into swap or the OOM killer.
COMPILE_MEMORY_BYTES = 3 * 2**29  # 1.5 GiB


def host_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _cgroup_room(cgroup: Path) -> int | None:
    """Bytes this process's memory cgroup still allows (its limit less its usage), or
    ``None`` without a limit. A container sees the host's ``/proc/meminfo``, so only its
    cgroup tells how much a build in it may use: v2 ``memory.max``/``memory.current``,
    v1 ``memory/memory.limit_in_bytes``/``memory.usage_in_bytes`` (no limit there reads
    as a number near 2**63)."""
    for limit_file, usage_file in (
        (cgroup / "memory.max", cgroup / "memory.current"),
        (cgroup / "memory" / "memory.limit_in_bytes", cgroup / "memory" / "memory.usage_in_bytes"),
    ):
        limit = _read_int(limit_file)
        if limit is None or limit >= 2**60:
            continue
        return max(0, limit - (_read_int(usage_file) or 0))
    return None


def available_memory(
    meminfo: Path = Path("/proc/meminfo"), cgroup: Path = Path("/sys/fs/cgroup")
) -> int | None:
    """Bytes of memory available for new work: Linux's ``MemAvailable`` (free plus
    reclaimable cache), no more than the memory cgroup's room (:func:`_cgroup_room`);
    else ``sysconf``'s available pages; else ``None`` (unknown)."""
    found: int | None = None
    try:
        for line in meminfo.read_text(encoding="ascii", errors="replace").splitlines():
            name, _, value = line.partition(":")
            fields = value.split()
            if name == "MemAvailable" and fields and fields[0].isdigit():
                found = int(fields[0]) * 1024  # /proc/meminfo counts kB (KiB)
                break
    except OSError:
        pass
    if found is None:
        try:
            found = int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
        except (AttributeError, OSError, ValueError):
            return None
    room = _cgroup_room(cgroup)
    return found if room is None else min(found, room)


def jobs_for(cpus: int, memory: int | None) -> int:
    """Cells to compile at once on a host with ``cpus`` CPUs and ``memory`` bytes
    available (``None``: unknown, the CPUs decide): one per CPU, as many as the memory
    holds at :data:`COMPILE_MEMORY_BYTES` each, at least 1."""
    by_memory = cpus if memory is None else memory // COMPILE_MEMORY_BYTES
    return max(1, min(cpus, by_memory))


def default_jobs() -> int:
    """``--jobs`` when not given: :func:`jobs_for` this host (:func:`host_cpus`,
    :func:`available_memory`)."""
    return jobs_for(host_cpus(), available_memory())


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


@functools.cache
def freethreaded_python(version: str) -> Interpreter | str:
    """The free-threaded CPython ``version`` (``"3.14t"``) to compile for, or why there
    is none on this host.

    This interpreter, when it is that one; else the developer tools' provisioner
    (``devtools.envs.freethreaded``, which builds it once from Debian's CPython sources and
    caches it), where it exists and can provide it.
    """
    if running_python() == version:
        return Interpreter(Path(sys.executable), Path(sysconfig.get_paths()["include"]))
    import importlib

    try:
        provisioner = importlib.import_module("devtools.envs.freethreaded")
    except ImportError:
        return (
            f"no free-threaded CPython {version} here (run this build with python{version}, "
            "or add the devtools.envs.freethreaded provisioner)"
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


def _interpreter_skip_reason(cell: Cell | PortableCell) -> str | None:
    """Why no interpreter here compiles for ``cell``'s Python ABI (``None``: one does): a
    free-threaded cell's CPython that cannot be had, or an abi3 cell on a free-threaded
    CPython (the limited API needs one with the GIL)."""
    if cell.freethreaded:
        found = freethreaded_python(cell.python)
        return found if isinstance(found, str) else None
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        return (
            f"an abi3 library compiles against a CPython with the GIL; this is "
            f"{running_python()} (run the build with such a CPython)"
        )
    return None


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
    reason = _interpreter_skip_reason(cell)
    if reason is not None:
        return reason
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
    reason = _interpreter_skip_reason(cell)
    if reason is not None:
        return reason
    return index_unreachable(cell.wheel.index_url)
