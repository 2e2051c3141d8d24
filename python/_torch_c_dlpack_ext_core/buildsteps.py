"""The steps every build of the compiler driver takes, native (:mod:`.driver`) or portable
(:mod:`.portableplan`): what a plan publishes (:class:`PlanOutputs`: the library, its
build record, the toolchain's argv), the location-free parts of the cache key
(:func:`without_locations`, :func:`source_digests`, :func:`python_headers_identity`), the
checks both plans share (:func:`find_sources`, :func:`check_sanitizers`,
:func:`find_python_exports`), and building itself: under the output's lock
(:func:`locked_build`) a matching record is a cache hit (:func:`cached_entry`), else
:func:`publish_build` compiles to a temporary name, audits, renames into place and writes
the record.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from .buildlock import SCRATCH_PREFIX, clean_stale_scratch, clean_stale_temps, hold
from .buildrequest import BuildPolicy
from .errors import BuildError, CommandError, ConfigError, ManifestError
from .files import atomic_write_bytes, read_verified, reserve_temp_file, sha256_of
from .manifest import ManifestEntry
from .naming import ABI3, PACKAGE, SOURCE_SUFFIXES, host_platform_tag
from .run import run
from .toolchains import TOOLCHAINS, CompileJob, Toolchain, toolchain_for
from .toolchains.protocol import SCRATCH_PLACEHOLDER
from .toolchains.sanitizers import Sanitizer
from .trust import TrustedOwners, check_trusted, read_trusted
from .version import __version__

__all__ = [
    "CACHE_SCHEMA",
    "CONTRACT_HEADER",
    "DEFAULT_POLICY",
    "MAX_RECORD_BYTES",
    "PORTABLE_DIR",
    "PlanOutputs",
    "cached_entry",
    "check_sanitizers",
    "find_python_exports",
    "find_sources",
    "locked_build",
    "publish_build",
    "python_headers_identity",
    "source_digests",
    "without_locations",
]


#: Bump when the driver changes what it produces, so old cache records stop matching.
#: 2: libraries for a CPython with the GIL are built with the limited API (python "abi3").
#: 3: the key names no input's location (placeholders and content digests instead).
CACHE_SCHEMA = 3


#: What a build does unless its caller says otherwise: audit, echo, no owner checks.
DEFAULT_POLICY = BuildPolicy()


class PlanOutputs:
    """What a plan publishes and how it is compiled, native or portable: the library
    (:attr:`output`), its build record (:attr:`sidecar`) and the toolchain's argv
    (:meth:`command`), from the plan's :attr:`filename`, ``output_dir``, ``platform`` and
    :meth:`job`."""

    output_dir: Path
    #: ``sys.platform`` of the target; selects :attr:`platform_toolchain`.
    platform: str

    @property
    def filename(self) -> str:
        raise NotImplementedError  # each plan names its library

    def job(self) -> CompileJob:
        raise NotImplementedError  # each plan says what to compile

    @property
    def platform_toolchain(self) -> Toolchain:
        """The toolchain that builds for :attr:`platform`."""
        return toolchain_for(self.platform)

    @property
    def output(self) -> Path:
        return self.output_dir / self.filename

    @property
    def sidecar(self) -> Path:
        return self.output_dir / f"{self.filename}.build.json"

    def command(self, output: Path | str, scratch: Path | str = SCRATCH_PLACEHOLDER) -> list[str]:
        """The compiler argv of CONTRIBUTING.md's build contract, writing ``output``.

        ``scratch``: a private directory for what the build writes besides the
        library (MSVC's objects, import library and .exp; the macOS export list).
        Linux uses none.
        """
        return self.platform_toolchain.command(self.job(), output, scratch)


def without_locations(command: Sequence[str], places: Mapping[str, Path]) -> list[str]:
    """``command`` with each of ``places`` (a whole path, or a path followed by a
    separator) written as its placeholder. The longest path goes first, so an input
    installed inside another's folder gets its own placeholder; the separator rule keeps
    ``.../site-packages/torch`` from matching ``.../site-packages/torch_c_dlpack_ext``."""
    ordered = sorted(places.items(), key=lambda item: len(str(item[1])), reverse=True)
    patterns = [
        (re.compile(re.escape(str(path)) + r"(?=$|[/\\])"), placeholder)
        for placeholder, path in ordered
    ]
    portable = []
    for arg in command:
        text = arg
        for pattern, placeholder in patterns:
            # A placeholder holds no backslash, so it is a literal replacement.
            text = pattern.sub(placeholder, text)
        portable.append(text)
    return portable


def python_headers_identity(include: Path) -> dict[str, str]:
    """sha256 of the headers that say which CPython the include dir is for
    (``patchlevel.h``: its version; ``pyconfig.h``: its configuration), where present."""
    return {
        name: sha256_of(include / name)
        for name in ("patchlevel.h", "pyconfig.h")
        if (include / name).is_file()
    }


def source_digests(source_dir: Path, *, skip: str = "") -> dict[str, str]:
    """sha256 of each source file under ``source_dir``, except those in its folder
    ``skip`` (the native library's key leaves out ``portable/``, which it never reads, so a
    change to the portable table rebuilds no native cell)."""
    return {
        path.relative_to(source_dir).as_posix(): sha256_of(path)
        for path in sorted(source_dir.rglob("*"))
        if path.is_file()
        and path.suffix in SOURCE_SUFFIXES
        and not (skip and path.relative_to(source_dir).parts[0] == skip)
    }


def find_sources(source_dir: Path | None = None) -> tuple[Path, tuple[Path, ...]]:
    """The C++ sources to compile: ``(directory, its *.cc files)``.

    Default: ``csrc/`` shipped inside the installed package (``torch_c_dlpack_ext/csrc``:
    wheels and sdists put it there), else the repository's ``csrc/``. Raises
    :class:`BuildError` when the directory holds no ``.cc`` file.
    """
    if source_dir is None:
        python_dir = Path(__file__).resolve().parent.parent
        candidates = [python_dir / PACKAGE / "csrc", python_dir.parent / "csrc"]
        source_dir = next((c for c in candidates if any(c.glob("*.cc"))), candidates[-1])
    sources = tuple(sorted(source_dir.glob("*.cc")))
    if not sources:
        raise BuildError(
            f"no C++ sources (*.cc) in {source_dir}; pass source_dir=<the project's csrc/> "
            "or reinstall torch-c-dlpack-ext (its wheel ships them in torch_c_dlpack_ext/csrc/)"
        )
    return source_dir.resolve(), sources


def check_sanitizers(toolchain: Toolchain, sanitizers: tuple[Sanitizer, ...]) -> None:
    """Raise :class:`~.errors.ConfigError` when ``toolchain`` builds no library with one of
    ``sanitizers`` (:attr:`.toolchains.Toolchain.sanitizers`)."""
    unsupported = [member.value for member in sanitizers if member not in toolchain.sanitizers]
    if not unsupported:
        return
    able = [name for name, other in TOOLCHAINS.items() if set(sanitizers) <= other.sanitizers]
    raise ConfigError(
        f"the {toolchain.name} toolchain builds no {','.join(unsupported)} sanitizer build; "
        f"leave sanitizers unset, or build on a platform whose toolchain does "
        f"({', '.join(able) or 'none'})"
    )


def find_python_exports(include: Path, target: str, explicit: Path | None) -> Path | None:
    """What exports the target Python's C API, for the ELF audit: ``explicit``; ``None``
    (the running interpreter) for abi3, which every CPython >= 3.9 with the GIL exports
    (the stable ABI audit checks the rest); for a free-threaded target another
    interpreter's ``libpython3.Xt.so`` or ``python3.Xt`` in the prefix holding
    ``include`` (``<prefix>/include/python3.Xt``)."""
    import sysconfig

    if explicit is not None:
        return explicit
    if target == ABI3:
        return None
    if Path(sysconfig.get_paths()["include"]).resolve() == include.resolve():
        return None
    prefix = include.parent.parent
    name = include.name  # python3.14t
    for candidate in (
        *sorted((prefix / "lib").glob(f"lib{name}.so*")),
        prefix / "bin" / name,
    ):
        if candidate.is_file():
            return candidate
    if not sys.platform.startswith("linux"):
        return None  # no ELF audit there
    raise BuildError(
        f"no lib{name}.so or bin/{name} under {prefix}: the ABI audit of a {target} "
        "library checks its Python symbols against that interpreter; pass "
        "python_exports=<its libpython or executable>"
    )


#: The most a build record may be (they are about 2 kB).
MAX_RECORD_BYTES = 1 << 20


def cached_entry(
    plan: PlanOutputs, key: str, owners: TrustedOwners | None = None
) -> ManifestEntry | None:
    """The entry an earlier build recorded for ``key``, if its library is intact. With
    ``owners`` (a caller that loads the library: the JIT), the record and the library are
    read only from files they alone could have written (:mod:`.trust`; an
    :class:`~.errors.UntrustedPathError` otherwise): the record carries the library's
    sha256 itself, so it proves nothing about who wrote either."""
    try:
        if owners is None:
            raw = plan.sidecar.read_bytes()
        else:
            raw = read_trusted(plan.sidecar, MAX_RECORD_BYTES, owners)
        record = json.loads(raw)
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("key") != key:
        return None
    try:
        entry = ManifestEntry.from_json(record.get("entry"))
        if entry.file != plan.filename:
            return None
        read_verified(entry, plan.output_dir, owners=owners)
    except ManifestError:
        return None
    return entry


def publish_build(
    plan: PlanOutputs,
    key: str,
    *,
    what: str,
    compiler_hint: str,
    echo: bool,
    stale_after: float,
    check: Callable[[Path], None],
    entry_of: Callable[[Path, str], ManifestEntry],
) -> ManifestEntry:
    """The steps every build takes, native or portable: remove what killed builds left,
    compile ``plan`` to a temporary name, ``check`` it (the audits), describe it
    (``entry_of(temporary, platform)``), rename it into place and write its record.
    ``what``: how a failure names the compile; ``compiler_hint``: what to check when the
    compiler wrote nothing. On failure no library is left at the output path."""
    # What killed builds of this library left (their pid is dead, or they are older than
    # the lock timeout); under the lock, so no live build of it is writing.
    for stale in clean_stale_temps(plan.output_dir, f".{plan.filename}.", stale_after):
        if echo:
            print(f"removed {stale.name}, left by a killed build", file=sys.stderr, flush=True)
    # The umask's mode for an executable (0755 under 022), not mkstemp's 0600: the cache
    # is meant to be shared. Taken from the new file, because the linker may replace it.
    tmp, mode = reserve_temp_file(plan.output_dir, prefix=f".{plan.filename}.", suffix=".tmp")
    clean_stale_scratch(Path(tempfile.gettempdir()), SCRATCH_PREFIX)
    scratch = tempfile.TemporaryDirectory(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-")
    toolchain = plan.platform_toolchain
    try:
        scratch_dir = Path(scratch.name)
        job = plan.job()
        toolchain.prepare_scratch(job, scratch_dir)
        command = toolchain.command(job, tmp, scratch_dir)
        started = time.monotonic()
        try:
            run(command, echo=echo)
        except CommandError as exc:
            raise BuildError.from_command(f"{what} failed", exc, tail=6000) from None
        if echo:
            print(
                f"compiled {plan.filename} in {time.monotonic() - started:.1f} s",
                file=sys.stderr,
                flush=True,
            )
        if tmp.stat().st_size == 0:
            raise BuildError(
                f"{what}: {shlex.join(command[: 1 + len(job.cxx_args)])} exited 0 but "
                f"wrote no library; {compiler_hint}",
                command=command,
            )
        check(tmp)
        # A cross toolchain's libraries are for its target, not for this host.
        entry = entry_of(tmp, toolchain.target_platform or host_platform_tag())
        tmp.chmod(mode)
        os.replace(tmp, plan.output)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        scratch.cleanup()
    # "package": the version whose sources were built; a reader that cannot compute the
    # key (a read-only cache) checks it beside the entry's torch, backend, ABIs.
    record = {
        "key": key,
        "entry": entry.to_json(),
        "command": plan.command(plan.output),
        "package": __version__,
    }
    atomic_write_bytes(plan.sidecar, (json.dumps(record, indent=2, sort_keys=True) + "\n").encode())
    return entry


def locked_build(
    plan: PlanOutputs,
    key: str,
    policy: BuildPolicy,
    *,
    announce: Callable[[], None],
    build: Callable[[], ManifestEntry],
) -> ManifestEntry:
    """Under ``plan``'s lock: its cached build when the record matches ``key`` (read from
    files ``policy.owners`` alone could write, when given), else ``announce()`` and
    ``build()``. With owners, the output directory is checked before the lock file is made
    there: a directory another user can write is refused (they could swap what is built,
    or plant a record and a library)."""
    owners = policy.owners
    plan.output_dir.mkdir(parents=True, exist_ok=True)
    if owners is not None:
        check_trusted(plan.output_dir, owners, directory=True)
    lock_path = Path(str(plan.output) + ".lock")
    with hold(lock_path, policy.timeout, f"the build of {plan.filename}"):
        cached = cached_entry(plan, key, owners)
        if cached is not None:
            if policy.echo:
                print(f"{plan.filename} is up to date (cache hit)", file=sys.stderr, flush=True)
            return cached
        announce()
        return build()


#: Where the portable library's sources are, in the source dir (``csrc/``).
PORTABLE_DIR = "portable"
#: The header of the one contract both tables keep, in ``csrc/`` (the portable table
#: includes it from ``portable/``).
CONTRACT_HEADER = "tcde_contract.h"
