"""Free-threaded CPython interpreters (3.14t, 3.13t), built once from Debian's sources and cached.

``free_threaded_python("3.14t")`` returns a :class:`FreeThreadedPython` whose
``executable`` runs without the GIL and whose ``include_dir`` holds the headers
(``pyconfig.h`` with ``Py_GIL_DISABLED 1``) that free-threaded libraries compile against.

Where it comes from: CPython's release tarball as Debian's source package carries it,
downloaded through a private apt configuration (:mod:`devtools.envs.debsource`; the suites and
pinned releases per version: :data:`SOURCES`). Then ``./configure --disable-gil
--disable-test-modules --prefix=<cache>/python/<version>``, ``make -j<cores>`` and ``make
install DESTDIR=<staging>``.

What the host needs (Debian or Ubuntu): ``apt-get``, ``make``, a C compiler, ``tar`` and
``xz-utils``, ``pkg-config``, the archive keyring, and the headers of the extension modules
that pip, uv, torch and the tests use (:data:`BUILD_DEPENDENCIES`): libssl-dev, zlib1g-dev,
libffi-dev, libbz2-dev, liblzma-dev, libsqlite3-dev, libreadline-dev, libncurses-dev and
uuid-dev. A missing one is a :class:`ProvisionError` naming the ``apt-get install`` command;
``--install-build-deps`` (``install_build_deps=True``, as root) runs it. Optional and not
checked: libgdbm-dev (``dbm.gnu``), libzstd-dev (3.14's ``compression.zstd``), tk-dev.

Cache. ``$TCDE_DEV_CACHE/python/<version>`` (default
``~/.cache/torch-c-dlpack-ext-dev/python/3.14t``). A file lock makes concurrent callers
build once; the build runs in a staging folder beside the cache entry and the finished
prefix is renamed into place, carrying a record file (:data:`RECORD`: the CPython version,
the Debian source version and suite, what was checked), so a prefix is either complete or
absent. Before the rename the staged interpreter is checked: ``Py_GIL_DISABLED`` is 1,
``sys._is_gil_enabled()`` is False, and the required extension modules import.

A cold build takes minutes (download, configure, make, install); each step prints a line
with the elapsed time, and a heartbeat every 30 s while a step runs (:data:`PROGRESS`).
The lines go to stderr or to :func:`set_progress`'s sink. Every command goes through the
project's one subprocess helper (:func:`devtools.base.steps.run_step`).

Command line: ``PYTHONPATH=python python -m devtools freethreaded 3.14t`` provisions (or
reuses) the interpreter and prints its executable's path.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from _torch_c_dlpack_ext_core.errors import CommandError, ConfigError
from _torch_c_dlpack_ext_core.files import atomic_write_bytes
from _torch_c_dlpack_ext_core.run import run
from devtools.base.errors import ProvisionError
from devtools.base.hostenv import dev_cache_root
from devtools.base.steps import Progress, run_step
from devtools.envs.debsource import (
    DEBIAN_MIRROR,
    KEYRING,
    DebianSource,
    PinnedRelease,
    fetch_source,
    upstream_version,
)

__all__ = [
    "BUILD_DEPENDENCIES",
    "PROGRESS",
    "RECORD",
    "SOURCES",
    "FreeThreadedPython",
    "free_threaded_python",
    "parse_version",
    "prefix_for",
    "set_progress",
]


#: The supported versions. sid carries the newest patch releases; the second suite keeps
#: a version available once sid drops it (trixie keeps 3.13, forky 3.14). The 3.14 pin is
#: for archives whose pool lags its index (seen here: the indexes name 3.14.8-3.14.10,
#: whose files the pool does not serve, while it serves 3.14.4-3.14.7).
SOURCES: Mapping[str, DebianSource] = {
    "3.13t": DebianSource(package="python3.13", suites=("sid", "trixie")),
    "3.14t": DebianSource(
        package="python3.14",
        suites=("sid", "forky"),
        pinned=(
            PinnedRelease(
                "3.14.7-1", "3b48dac8fb59f62eaa67ac83c1eb12bda1b7a08406dd286e252c11a66be27f81"
            ),
        ),
    ),
}
#: Extension module -> the Debian package with its headers. Each must import in the result.
BUILD_DEPENDENCIES: Mapping[str, str] = {
    "ssl": "libssl-dev",
    "zlib": "zlib1g-dev",
    "_ctypes": "libffi-dev",
    "_bz2": "libbz2-dev",
    "_lzma": "liblzma-dev",
    "_sqlite3": "libsqlite3-dev",
    "readline": "libreadline-dev",
    "_curses": "libncurses-dev",
    "_uuid": "uuid-dev",
}
#: Tools the build runs -> the Debian package providing them.
BUILD_TOOLS: Mapping[str, str] = {
    "make": "make",
    "cc": "gcc",
    "pkg-config": "pkg-config",
    "tar": "tar",
    "xz": "xz-utils",
}
#: Written into the prefix before it is renamed into place.
RECORD = ".tcde-freethreaded.json"
#: A CPython build tree plus its installation; checked before starting.
NEEDED_FREE_BYTES = 2 * 1024**3
_LOCK_TIMEOUT_S = 3600.0
_VERSION_RE = re.compile(r"^(3)\.(\d+)(t?)$")

# Runs in the staged interpreter (-I: no PYTHON* variables, such as PYTHON_GIL=1, apply).
_CHECK = """\
import importlib, json, platform, sys, sysconfig
missing = []
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except ImportError as exc:
        missing.append(f"{name} ({exc})")
print(json.dumps({
    "python": platform.python_version(),
    "Py_GIL_DISABLED": sysconfig.get_config_var("Py_GIL_DISABLED"),
    "gil_enabled": sys._is_gil_enabled(),
    "include": sysconfig.get_paths()["include"],
    "missing": missing,
}))
"""


@dataclasses.dataclass(frozen=True)
class FreeThreadedPython:
    """A cached free-threaded CPython installation."""

    #: ``"3.14t"``
    version: str
    #: ``<prefix>/bin/python3.14t``
    executable: Path
    #: The headers to compile against (``<prefix>/include/python3.14t``).
    include_dir: Path
    prefix: Path
    #: The CPython release, e.g. ``"3.14.10"``.
    python_version: str
    #: The Debian source it was built from, e.g. ``"python3.14 3.14.10-1 (sid)"``.
    source: str


def parse_version(version: object) -> tuple[str, DebianSource]:
    """``"3.14t"`` -> (``"3.14t"``, its :class:`DebianSource`); anything else is a
    :class:`ConfigError` that names the supported versions."""
    supported = ", ".join(SOURCES)
    if not isinstance(version, str):
        raise ConfigError(f"free-threaded version must be a string like '3.14t', not {version!r}")
    match = _VERSION_RE.match(version)
    if match is None:
        raise ConfigError(f"{version!r} is not a version like '3.14t'; supported: {supported}")
    if not match.group(3):
        raise ConfigError(
            f"{version!r} names the GIL build; the free-threaded one is '{version}t'"
            f" (supported: {supported})"
        )
    if version not in SOURCES:
        raise ConfigError(f"no free-threaded CPython {version} here; supported: {supported}")
    return version, SOURCES[version]


def prefix_for(version: str) -> Path:
    """Where ``version``'s installation is cached (``$TCDE_DEV_CACHE/python/<version>``)."""
    parse_version(version)
    return dev_cache_root() / "python" / version


#: Which version is being built, each step and its duration, a heartbeat while it runs.
PROGRESS = Progress("freethreaded")


def set_progress(sink: Callable[[str], None] | None) -> None:
    """Send progress lines to ``sink`` (``None``: back to stderr)."""
    PROGRESS.set_sink(sink)


def _missing_packages(packages: Sequence[str]) -> list[str]:
    """The Debian packages of ``packages`` that dpkg does not have installed."""
    try:
        out = run(
            ["dpkg-query", "-W", "-f", "${Package} ${db:Status-Abbrev}\n", *packages], echo=False
        ).stdout
    except CommandError as exc:  # exit 1: some are unknown to dpkg; stdout lists the rest
        if exc.returncode != 1:
            raise ProvisionError(f"cannot ask dpkg what is installed: {exc}") from None
        out = exc.stdout
    installed = {
        fields[0] for fields in (line.split() for line in out.splitlines()) if fields[1:2] == ["ii"]
    }
    return [package for package in packages if package not in installed]


def _preflight(install_build_deps: bool) -> None:
    """Fail early, naming the remedy, when this host cannot build."""
    if shutil.which("apt-get") is None or shutil.which("dpkg-query") is None:
        raise ProvisionError(
            "building a free-threaded CPython needs apt-get and dpkg (Debian or Ubuntu): "
            "its source comes from Debian's CPython source packages"
        )
    if not KEYRING.is_file():
        raise ProvisionError(f"{KEYRING} is missing; apt-get install debian-archive-keyring")
    tools = [package for tool, package in BUILD_TOOLS.items() if shutil.which(tool) is None]
    packages = sorted({*tools, *_missing_packages(sorted(set(BUILD_DEPENDENCIES.values())))})
    if not packages:
        return
    command = ["apt-get", "install", "-y", "--no-install-recommends", *packages]
    if not install_build_deps:
        raise ProvisionError(
            f"building a free-threaded CPython needs {', '.join(packages)}: "
            f"{' '.join(command)} (or pass --install-build-deps)"
        )
    with PROGRESS.step(f"installing the build dependencies {' '.join(packages)}"):
        run_step("installing the build dependencies", command)


def _build(version: str, source: DebianSource, prefix: Path, mirror: str, jobs: int) -> None:
    """Build into a staging folder beside ``prefix``, check, and rename into place."""
    staging = Path(tempfile.mkdtemp(prefix=f".build-{version}-", dir=prefix.parent))
    started = time.monotonic()
    try:
        orig, provenance = fetch_source(source, mirror, staging, PROGRESS)
        python_version = upstream_version(provenance.split()[1])
        PROGRESS.log(f"building CPython {python_version} from {provenance}, without the GIL")
        with PROGRESS.step(f"unpacking {orig.name}"):
            run_step("unpacking the source", ["tar", "-xf", orig, "-C", staging])
        trees = [p for p in staging.glob("Python-*") if p.is_dir()]
        if len(trees) != 1:
            raise ProvisionError(f"{orig.name} did not unpack into one Python-* folder")
        tree = trees[0]
        configure = ["--disable-gil", "--disable-test-modules", f"--prefix={prefix}"]
        with PROGRESS.step(f"./configure {' '.join(configure)}"):
            run_step("configure", ["./configure", *configure], cwd=tree)
        with PROGRESS.step(f"make -j{jobs} (the longest step)"):
            run_step("make", ["make", f"-j{jobs}"], cwd=tree)
        destdir = staging / "destdir"
        with PROGRESS.step("make install (into the staging folder)"):
            run_step("make install", ["make", "install", f"DESTDIR={destdir}"], cwd=tree)
        staged = destdir / prefix.relative_to(prefix.anchor)
        executable = staged / "bin" / f"python{version}"
        with PROGRESS.step("checking the interpreter (GIL disabled, extension modules import)"):
            out = run_step(
                "checking the interpreter",
                [executable, "-I", "-c", _CHECK, *BUILD_DEPENDENCIES],
                echo=False,
            )
        facts = json.loads(out.splitlines()[0])
        _verify(version, facts)
        record = {
            "version": version,
            "python": facts["python"],
            "source": provenance,
            "mirror": mirror,
            "configure": configure,
            "include": str(prefix / Path(facts["include"]).relative_to(staged)),
            "Py_GIL_DISABLED": facts["Py_GIL_DISABLED"],
            "gil_enabled_by_default": facts["gil_enabled"],
            "seconds": round(time.monotonic() - started, 1),
        }
        atomic_write_bytes(staged / RECORD, (json.dumps(record, indent=2) + "\n").encode())
        staged.rename(prefix)
        PROGRESS.log(f"{prefix} ready in {record['seconds']} s")
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _verify(version: str, facts: Mapping[str, object]) -> None:
    """Refuse an interpreter that has the GIL or lacks a required extension module."""
    if facts.get("Py_GIL_DISABLED") != 1 or facts.get("gil_enabled") is not False:
        raise ProvisionError(
            f"the CPython built for {version} is not free-threaded "
            f"(Py_GIL_DISABLED={facts.get('Py_GIL_DISABLED')!r}, "
            f"sys._is_gil_enabled()={facts.get('gil_enabled')!r})"
        )
    missing = facts.get("missing")
    if isinstance(missing, list) and missing:
        failures = [str(item) for item in missing]
        wanted = sorted({BUILD_DEPENDENCIES.get(item.split()[0], "?") for item in failures})
        raise ProvisionError(
            f"the CPython built for {version} lacks {'; '.join(failures)}; "
            f"apt-get install {' '.join(wanted)} and build again"
        )


def _read(version: str, prefix: Path) -> FreeThreadedPython | None:
    """The cached installation, or None when there is no complete one."""
    executable = prefix / "bin" / f"python{version}"
    try:
        record = json.loads((prefix / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or not executable.is_file():
        return None
    return FreeThreadedPython(
        version=version,
        executable=executable,
        include_dir=Path(record["include"]),
        prefix=prefix,
        python_version=str(record["python"]),
        source=str(record["source"]),
    )


def _clear_stale(version: str, prefix: Path) -> None:
    """Remove what a killed build left (only the lock holder builds, so anything here is
    such a leftover), and refuse a cache without room for a build."""
    for stale in prefix.parent.glob(f".build-{version}-*"):
        PROGRESS.log(f"removing {stale} (left by an interrupted build)")
        shutil.rmtree(stale, ignore_errors=True)
    if prefix.exists():
        PROGRESS.log(f"removing incomplete {prefix} (no {RECORD})")
        shutil.rmtree(prefix)
    free = shutil.disk_usage(prefix.parent).free
    if free < NEEDED_FREE_BYTES:
        raise ProvisionError(
            f"{prefix.parent} has {free / 1024**3:.1f} GiB free; building CPython needs "
            f"{NEEDED_FREE_BYTES / 1024**3:.0f} GiB"
        )


def free_threaded_python(
    version: str,
    *,
    jobs: int | None = None,
    mirror: str = DEBIAN_MIRROR,
    install_build_deps: bool = False,
) -> FreeThreadedPython:
    """The cached free-threaded CPython ``version`` (``"3.14t"``, ``"3.13t"``), built on first use.

    ``jobs``: parallel make jobs (default: the CPU count). ``mirror``: the Debian archive.
    ``install_build_deps``: apt-get install missing build dependencies instead of failing.
    Raises :class:`ConfigError` for an unsupported version and :class:`ProvisionError` when
    this host cannot build it (no apt-get, unreachable archive, missing compiler or
    headers, a failed step: the message carries the tool's last output lines).
    """
    from filelock import FileLock, Timeout

    version, source = parse_version(version)
    jobs = jobs if jobs is not None else (os.cpu_count() or 1)
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ConfigError(f"jobs must be a positive integer, not {jobs!r}")
    prefix = prefix_for(version)
    found = _read(version, prefix)
    if found is not None:
        return found
    try:
        prefix.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(prefix) + ".lock", timeout=_LOCK_TIMEOUT_S)
        lock.acquire()
    except Timeout:
        raise ProvisionError(
            f"another process has held {prefix}.lock for {_LOCK_TIMEOUT_S:.0f} s (a build "
            "that hangs?); end it, or remove the lock if no such process exists"
        ) from None
    except OSError as exc:
        raise ProvisionError(
            f"cannot use the dev cache {prefix.parent} ({exc}); set TCDE_DEV_CACHE to a "
            "writable folder"
        ) from None
    try:
        found = _read(version, prefix)
        if found is not None:  # another process built it while we waited
            return found
        with PROGRESS.making(version):
            _clear_stale(version, prefix)
            _preflight(install_build_deps)
            _build(version, source, prefix, mirror, jobs)
    finally:
        lock.release()
    found = _read(version, prefix)
    if found is None:
        raise ProvisionError(f"{prefix} is incomplete right after its build")
    return found
