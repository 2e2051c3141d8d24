"""Free-threaded CPython interpreters (3.14t, 3.13t), built once from Debian's sources and cached.

``free_threaded_python("3.14t")`` returns a :class:`FreeThreadedPython` whose
``executable`` runs without the GIL and whose ``include_dir`` holds the headers
(``pyconfig.h`` with ``Py_GIL_DISABLED 1``) that free-threaded libraries compile against.

Where it comes from. No Debian suite ships a free-threaded (``nogil``) binary package, and
PyPI has no CPython source distribution, so the interpreter is built from CPython's own
release tarball as Debian's source package carries it (the ``.orig.tar.xz``; Debian's
patches are not applied). The tarball is fetched with ``apt-get source --download-only``
through a PRIVATE apt configuration (a temporary ``sources.list`` with one ``deb-src`` line
per suite of :data:`SOURCES`, its own lists and cache): the system's apt sources are
neither read nor changed, and apt checks the files against the suite's signed index
(``/usr/share/keyrings/debian-archive-keyring.gpg``). The versions the suites' indexes name
(``apt-cache madison``) are tried newest first, because an archive's pool can lag its
index (a mirror mid-sync, or a proxy like the one our machines use, which serves
``python3.13`` 3.13.15 and 3.13.5 but none of the 3.14.8-3.14.10 its index names). When none
downloads, a release pinned in :data:`SOURCES` is taken from the pool with apt's own
downloader (``apt-helper download-file``), checked against the pinned SHA-256 of its
``.orig`` tarball (for 3.14: 3.14.7; how the pin was verified is in docs/facts.md). Then
``./configure --disable-gil --disable-test-modules --prefix=<cache>/python/<version>``,
``make -j<cores>`` and ``make install DESTDIR=<staging>``.

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
with the elapsed time, and a heartbeat every :data:`HEARTBEAT_S` seconds while a step runs.
The lines go to stderr or to :func:`set_progress`'s sink. Every command goes through the
project's one subprocess helper (``_torch_c_dlpack_ext_core.run``).

Command line: ``PYTHONPATH=python python -m devtools freethreaded 3.14t`` provisions (or
reuses) the interpreter and prints its executable's path.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from packaging.version import Version

from _torch_c_dlpack_ext_core.errors import CommandError, ConfigError
from _torch_c_dlpack_ext_core.manifest import atomic_write_bytes
from _torch_c_dlpack_ext_core.run import run
from devtools.errors import ProvisionError
from devtools.hostenv import dev_cache_root

__all__ = [
    "BUILD_DEPENDENCIES",
    "DEBIAN_MIRROR",
    "KEYRING",
    "RECORD",
    "SOURCES",
    "DebianSource",
    "FreeThreadedPython",
    "PinnedRelease",
    "apt_sources_list",
    "dsc_version",
    "free_threaded_python",
    "orig_url",
    "parse_version",
    "prefix_for",
    "set_progress",
    "source_candidates",
    "upstream_version",
]


@dataclasses.dataclass(frozen=True)
class PinnedRelease:
    """A release taken straight from the archive's pool when no version the indexes name
    downloads, checked against the SHA-256 of its ``.orig`` tarball pinned here (where each
    pin was verified: docs/facts.md)."""

    debian_version: str
    orig_sha256: str


@dataclasses.dataclass(frozen=True)
class DebianSource:
    """Where the CPython of one free-threaded version comes from: a Debian source package,
    the suites whose indexes name its versions (newest tried first), and pinned releases
    tried last."""

    package: str
    suites: tuple[str, ...]
    pinned: tuple[PinnedRelease, ...] = ()


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
DEBIAN_MIRROR = "http://deb.debian.org/debian"
KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
#: apt's own downloader (same proxy settings as apt; checks a given hash).
_APT_HELPER = "/usr/lib/apt/apt-helper"
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
HEARTBEAT_S = 30.0
_LOCK_TIMEOUT_S = 3600.0
_VERSION_RE = re.compile(r"^(3)\.(\d+)(t?)$")
#: How many lines of a failed tool's output an error carries.
_TAIL_LINES = 25

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


def apt_sources_list(source: DebianSource, mirror: str = DEBIAN_MIRROR) -> str:
    """The private ``sources.list``: one ``deb-src`` line per suite, signed by the archive
    keyring (so apt verifies the indexes as it does for the system's own sources)."""
    mirror = mirror.rstrip("/")
    if not mirror or any(c.isspace() for c in mirror):
        raise ConfigError(f"apt mirror {mirror!r} is not a URL like {DEBIAN_MIRROR!r}")
    return "".join(
        f"deb-src [signed-by={KEYRING}] {mirror} {suite} main\n" for suite in source.suites
    )


def upstream_version(debian_version: str) -> str:
    """The CPython release of a Debian version: ``"3.13.5-2+deb13u5"`` -> ``"3.13.5"``
    (epoch and Debian revision dropped); anything else is a :class:`ProvisionError`."""
    # "~" sorts a Debian pre-release before its release: 3.13.0~rc3 is CPython's 3.13.0rc3.
    version = debian_version.strip().split(":", 1)[-1].rsplit("-", 1)[0].replace("~", "")
    if not re.fullmatch(r"3\.\d+\.\d+((a|b|rc)\d+)?", version):
        raise ProvisionError(f"Debian version {debian_version!r} is not a CPython release")
    return version


def dsc_version(text: str) -> str:
    """The ``Version`` field of a (clear-signed) ``.dsc`` file."""
    body = text.split("-----BEGIN PGP SIGNATURE-----", 1)[0]
    match = re.search(r"^Version:[ \t]*(\S+)[ \t]*$", body, re.MULTILINE)
    if match is None:
        raise ProvisionError("the downloaded .dsc has no Version field")
    return match.group(1)


def orig_url(package: str, debian_version: str, mirror: str = DEBIAN_MIRROR) -> str:
    """The pool URL of the ``.orig.tar.xz`` of ``package`` at ``debian_version``."""
    section = package[:4] if package.startswith("lib") else package[:1]
    upstream = upstream_version(debian_version)
    return f"{mirror.rstrip('/')}/pool/main/{section}/{package}/{package}_{upstream}.orig.tar.xz"


def source_candidates(madison: str, package: str) -> list[tuple[str, str]]:
    """``apt-cache madison`` lines -> [(Debian version, suite)] of CPython releases, newest
    first, each version once. Pre-releases (``3.15.0~a2-1``) are left out."""
    found: dict[str, str] = {}
    for line in madison.splitlines():
        fields = [field.strip() for field in line.split("|")]
        if len(fields) != 3 or fields[0] != package or not fields[2].endswith(" Sources"):
            continue
        debian_version, where = fields[1], fields[2].split()
        if "~" in debian_version:
            continue
        try:
            upstream_version(debian_version)
        except ProvisionError:
            continue
        found.setdefault(debian_version, where[-2].split("/")[0] if len(where) >= 3 else "?")

    def newest(version: str) -> tuple[Version, str]:
        return Version(upstream_version(version)), version

    return sorted(found.items(), key=lambda item: newest(item[0]), reverse=True)


# ---- progress ------------------------------------------------------------------------------

_SINK: list[Callable[[str], None]] = []
_CURRENT: dict[str, tuple[str, float]] = {}


def set_progress(sink: Callable[[str], None] | None) -> None:
    """Send progress lines to ``sink`` (``None``: back to stderr)."""
    _SINK[:] = [sink] if sink is not None else []


def _log(message: str) -> None:
    what, started = _CURRENT.get("build", ("", time.monotonic()))
    where = f" [{what}, {time.monotonic() - started:.0f} s]" if what else ""
    line = f"freethreaded{where}: {message}"
    if _SINK:
        _SINK[0](line)
    else:
        print(line, file=sys.stderr, flush=True)


@contextmanager
def _step(doing: str) -> Iterator[None]:
    """Log the step, a heartbeat every :data:`HEARTBEAT_S` while it runs, and its duration."""
    _log(doing)
    done = threading.Event()
    started = time.monotonic()

    def beat() -> None:
        while not done.wait(HEARTBEAT_S):
            _log(f"  still {doing} ({time.monotonic() - started:.0f} s)")

    thread = threading.Thread(target=beat, name="freethreaded-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
    _log(f"  done in {time.monotonic() - started:.1f} s")


def _run(
    step: str,
    cmd: Sequence[str | os.PathLike[str]],
    *,
    cwd: Path | None = None,
    timeout: float | None = None,
    echo: bool = True,
) -> str:
    """Run one command of ``step``; a failure is a :class:`ProvisionError` with its last lines."""
    try:
        proc = run(cmd, cwd=cwd, timeout=timeout, echo=echo)
    except CommandError as exc:
        output = "\n".join(part for part in (exc.stdout.strip(), exc.stderr.strip()) if part)
        tail = "\n".join(output.splitlines()[-_TAIL_LINES:])
        raise ProvisionError(
            f"{step} failed (exit code {exc.returncode}): {' '.join(exc.cmd)}\n"
            f"last lines of its output:\n{tail}"
        ) from None
    return proc.stdout + proc.stderr


# ---- the build -----------------------------------------------------------------------------


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
    with _step(f"installing the build dependencies {' '.join(packages)}"):
        _run("installing the build dependencies", command)


def _fetch_source(source: DebianSource, mirror: str, work: Path) -> tuple[Path, str]:
    """Download ``source`` with a private apt configuration; (orig tarball, provenance)."""
    apt = work / "apt"
    for folder in ("lists/partial", "cache/archives/partial", "sources.list.d"):
        (apt / folder).mkdir(parents=True)
    (apt / "sources.list").write_text(apt_sources_list(source, mirror), encoding="utf-8")
    options = [
        f"-oDir::Etc::SourceList={apt / 'sources.list'}",
        f"-oDir::Etc::SourceParts={apt / 'sources.list.d'}",
        f"-oDir::State::Lists={apt / 'lists'}",
        f"-oDir::Cache={apt / 'cache'}",
        # The private folders are root's; apt's download sandbox user could not write them.
        "-oAPT::Sandbox::User=root",
    ]
    suites = ", ".join(source.suites)
    with _step(f"reading Debian's source indexes ({suites}) from {mirror}"):
        _run(
            f"apt-get update of a private deb-src list ({suites} at {mirror}; is it reachable?)",
            ["apt-get", *options, "--error-on=any", "update"],
            timeout=900,
        )
    madison = _run(
        f"apt-cache madison {source.package}",
        ["apt-cache", *options, "madison", source.package],
        echo=False,
    )
    candidates = source_candidates(madison, source.package)
    if not candidates and not source.pinned:
        raise ProvisionError(
            f"no CPython release of {source.package} in {suites} at {mirror}:\n{madison.strip()}"
        )
    _log("candidates, newest first: " + ", ".join(f"{v} ({s})" for v, s in candidates))
    # An index can name a version its pool does not serve yet (a mirror mid-sync, a proxy
    # behind the index): take the newest one that downloads.
    failures: list[str] = []
    for debian_version, suite in candidates:
        download = work / f"download-{len(failures)}"
        download.mkdir()
        try:
            with _step(
                f"downloading {source.package} {debian_version} ({suite}) with apt-get source"
            ):
                _run(
                    f"apt-get source {source.package}={debian_version}",
                    [
                        "apt-get",
                        *options,
                        "source",
                        "--download-only",
                        f"{source.package}={debian_version}",
                    ],
                    cwd=download,
                    timeout=1800,
                )
        except ProvisionError as exc:
            _log(f"  {debian_version} did not download; trying an older one")
            failures.append(str(exc))
            continue
        dscs = sorted(download.glob(f"{source.package}_*.dsc"))
        if len(dscs) != 1 or dsc_version(dscs[0].read_text(encoding="utf-8")) != debian_version:
            raise ProvisionError(f"apt-get source left no .dsc of {debian_version} in {download}")
        origs = [
            path
            for path in sorted(download.glob(f"{source.package}_*.orig.tar.*"))
            if path.suffix != ".asc"  # upstream's signature, shipped beside the tarball
        ]
        if len(origs) != 1:
            raise ProvisionError(f"apt-get source left no single .orig tarball in {download}")
        return origs[0], f"{source.package} {debian_version} ({suite})"
    for pin in source.pinned:
        url = orig_url(source.package, pin.debian_version, mirror)
        target = work / url.rsplit("/", 1)[1]
        try:
            with _step(
                f"downloading the pinned {source.package} {pin.debian_version} from the pool"
            ):
                _run(
                    f"downloading {url} (SHA-256 {pin.orig_sha256})",
                    [
                        _APT_HELPER,
                        "-oAPT::Sandbox::User=root",
                        "download-file",
                        url,
                        target,
                        f"SHA256:{pin.orig_sha256}",
                    ],
                    timeout=1800,
                )
        except ProvisionError as exc:
            failures.append(str(exc))
            continue
        return target, f"{source.package} {pin.debian_version} (pool, pinned SHA-256)"
    raise ProvisionError(
        f"no version of {source.package} downloads from {mirror}; the last attempt:\n"
        + (failures[-1] if failures else "(none: the indexes name no release)")
    )


def _build(version: str, source: DebianSource, prefix: Path, mirror: str, jobs: int) -> None:
    """Build into a staging folder beside ``prefix``, check, and rename into place."""
    staging = Path(tempfile.mkdtemp(prefix=f".build-{version}-", dir=prefix.parent))
    started = time.monotonic()
    try:
        orig, provenance = _fetch_source(source, mirror, staging)
        python_version = upstream_version(provenance.split()[1])
        _log(f"building CPython {python_version} from {provenance}, without the GIL")
        with _step(f"unpacking {orig.name}"):
            _run("unpacking the source", ["tar", "-xf", orig, "-C", staging])
        trees = [p for p in staging.glob("Python-*") if p.is_dir()]
        if len(trees) != 1:
            raise ProvisionError(f"{orig.name} did not unpack into one Python-* folder")
        tree = trees[0]
        configure = ["--disable-gil", "--disable-test-modules", f"--prefix={prefix}"]
        with _step(f"./configure {' '.join(configure)}"):
            _run("configure", ["./configure", *configure], cwd=tree)
        with _step(f"make -j{jobs} (the longest step)"):
            _run("make", ["make", f"-j{jobs}"], cwd=tree)
        destdir = staging / "destdir"
        with _step("make install (into the staging folder)"):
            _run("make install", ["make", "install", f"DESTDIR={destdir}"], cwd=tree)
        staged = destdir / prefix.relative_to(prefix.anchor)
        executable = staged / "bin" / f"python{version}"
        with _step("checking the interpreter (GIL disabled, extension modules import)"):
            out = _run(
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
        _log(f"{prefix} ready in {record['seconds']} s")
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
        _CURRENT["build"] = (version, time.monotonic())
        # Only the lock holder builds, so what is here is left over from a killed run.
        for stale in prefix.parent.glob(f".build-{version}-*"):
            _log(f"removing {stale} (left by an interrupted build)")
            shutil.rmtree(stale, ignore_errors=True)
        if prefix.exists():
            _log(f"removing incomplete {prefix} (no {RECORD})")
            shutil.rmtree(prefix)
        free = shutil.disk_usage(prefix.parent).free
        if free < NEEDED_FREE_BYTES:
            raise ProvisionError(
                f"{prefix.parent} has {free / 1024**3:.1f} GiB free; building CPython needs "
                f"{NEEDED_FREE_BYTES / 1024**3:.0f} GiB"
            )
        _preflight(install_build_deps)
        _build(version, source, prefix, mirror, jobs)
    finally:
        _CURRENT.pop("build", None)
        lock.release()
    found = _read(version, prefix)
    if found is None:
        raise ProvisionError(f"{prefix} is incomplete right after its build")
    return found
