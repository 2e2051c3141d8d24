"""The :class:`Toolchain` protocol and the plain data its methods exchange.

A toolchain is everything about a build that differs per platform: which compiler
it accepts and how it reads that compiler's identity, the compile-and-link argv,
how torch's libraries are named for the link, the shared-library file name, the
post-link audit, and what the wheel repair tool must leave out. The driver holds
the platform-independent plan and calls one toolchain; the registry in
:mod:`._torch_c_dlpack_ext_core.toolchains` picks it from ``sys.platform``.

Imports only the standard library, :mod:`..errors`, :mod:`..naming` and :mod:`.sanitizers`.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import shlex
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from ..errors import CompilerNotFoundError
from ..naming import Backend
from .sanitizers import Sanitizer

__all__ = [
    "SCRATCH_PLACEHOLDER",
    "VERSION_SCRIPT",
    "AuditOutcome",
    "CompileJob",
    "Compiler",
    "Toolchain",
    "TorchFiles",
    "compiler_argv",
    "locate_compiler",
]

#: In the source dir: the linker version script naming the only exported symbols.
VERSION_SCRIPT = "exports.map"
#: Stands for the per-build scratch directory in commands that are only hashed or shown.
SCRATCH_PLACEHOLDER = "{scratch}"


class AuditOutcome(str, enum.Enum):
    """Result of :meth:`Toolchain.audit` when it does not raise."""

    PASSED = "passed"
    #: Not an ELF platform: the dual C++ ABI and this check do not apply.
    NOT_APPLICABLE = "not applicable"


@dataclasses.dataclass(frozen=True)
class Compiler:
    """A compiler a toolchain accepted."""

    #: Absolute path of the executable.
    path: str
    #: The line it identifies itself with (part of the build's cache key).
    banner: str
    #: Short identity recorded in the library and the manifest (``g++ 12.2.0``).
    identity: str
    #: Arguments that come with the compiler, before the build's own: ``$CXX`` is a
    #: command (``ccache g++``: path ``/usr/bin/ccache``, args ``("g++",)``).
    args: tuple[str, ...] = ()

    @property
    def command(self) -> tuple[str, ...]:
        """The argv prefix that runs this compiler: :attr:`path`, then :attr:`args`."""
        return (self.path, *self.args)


@dataclasses.dataclass(frozen=True)
class CompileJob:
    """What a toolchain needs to write the compile-and-link argv of one library."""

    #: The compiler: a C++ compiler for the native library, a C compiler for the
    #: portable one (:attr:`language`).
    cxx: str
    #: ``c++17`` or ``c++20``; ``c11`` for the portable library.
    std: str
    #: Preprocessor definitions without the ``-D`` / ``/D``, in order.
    defines: tuple[str, ...]
    #: Include directories in the build contract's order.
    includes: tuple[Path, ...]
    sources: tuple[Path, ...]
    #: The directory holding the sources (and, if present, ``exports.map``).
    source_dir: Path
    #: torch's ``lib/``, where the link finds torch's libraries (``None``: no torch is
    #: linked, the portable library).
    lib_dir: Path | None
    #: torch's libraries to link, by stem (``c10``), in order.
    libraries: tuple[str, ...]
    #: The library's file name (the install name on macOS, the import library's stem on
    #: Windows).
    filename: str
    #: Windows only: the Python import library a DLL must link.
    python_import_lib: Path | None = None
    #: :attr:`Compiler.args`: what follows ``cxx`` before the build's own arguments.
    cxx_args: tuple[str, ...] = ()
    #: ``"c++"`` (the native library) or ``"c"`` (the portable library: C11, no torch).
    language: str = "c++"
    #: The linker version script (default: ``source_dir/exports.map``, where present).
    version_script: Path | None = None
    #: A sanitizer build's instrumentation (:mod:`.sanitizers`; tests only): ``()`` for a
    #: library to ship.
    sanitizers: tuple[Sanitizer, ...] = ()

    @property
    def exports_map(self) -> Path:
        """The version script naming the library's exports."""
        return self.version_script or self.source_dir / VERSION_SCRIPT


class TorchFiles(Protocol):
    """What the audit reads of a torch installation (:class:`..torchinstall.TorchInstall`)."""

    @property
    def root(self) -> Path: ...
    @property
    def version(self) -> str: ...
    @property
    def lib_dir(self) -> Path: ...
    @property
    def cxx11_abi(self) -> bool | None: ...


class Toolchain(Protocol):
    """Everything about building the exchange library that depends on the platform."""

    @property
    def name(self) -> str:
        """The registry key: ``gnu``, ``darwin`` or ``msvc``."""
        ...

    @property
    def library_prefix(self) -> str:
        """Prefix of a shared library's file name (``lib``; none for a DLL)."""
        ...

    @property
    def library_suffix(self) -> str:
        """Suffix of a shared library's file name (``.so``, ``.dylib``, ``.dll``)."""
        ...

    @property
    def target_platform(self) -> str | None:
        """The wheel platform tag of the code it makes when that is not the host's (a
        cross toolchain: ``linux_aarch64``), recorded in each library's manifest entry;
        ``None`` for a native toolchain (the host's tag is recorded)."""
        ...

    @property
    def dual_abi(self) -> bool:
        """libstdc++'s dual ABI applies: torch's ABI is read and compiled in, and it is
        part of the library's name."""
        ...

    @property
    def links_torch_python(self) -> bool:
        """The library links libtorch_python (and libtorch, libtorch_cuda/_hip). False on
        Linux, where csrc/ looks its torch_python symbols up at run time instead
        (``TCDE_TORCH_PYTHON_AT_RUN_TIME`` in csrc/tcde_python.h, which keys on the same
        platform), so loading it does not walk libtorch_python's dependency closure."""
        ...

    @property
    def sanitizers(self) -> frozenset[Sanitizer]:
        """The sanitizers it can build a library with (:mod:`.sanitizers`), whose runtime
        symbols its audits then accept; empty where no such build has been tried."""
        ...

    @property
    def repair_excludes(self) -> tuple[str, ...]:
        """File names (shell patterns) the wheel repair tool (auditwheel, delocate) must
        never graft into a wheel: torch's libraries and the GPU runtimes torch brings."""
        ...

    def find_compiler(
        self, cxx: str | os.PathLike[str] | None, environ: Mapping[str, str]
    ) -> Compiler:
        """The compiler to use: ``cxx``, else ``$CXX``, else the toolchain's default on
        ``environ["PATH"]``. Raises :class:`CompilerNotFoundError`."""
        ...

    def find_c_compiler(
        self, cc: str | os.PathLike[str] | None, environ: Mapping[str, str]
    ) -> Compiler:
        """The C compiler of the portable library: ``cc``, else ``$CC``, else the
        toolchain's default C compiler on ``environ["PATH"]``. Raises
        :class:`CompilerNotFoundError`."""
        ...

    def link_library_name(self, stem: str) -> str:
        """The file in ``torch/lib`` a link against library ``stem`` (``c10``) reads."""
        ...

    def missing_link_libraries(self, lib_dir: Path, stems: tuple[str, ...]) -> list[str]:
        """Which of torch's libraries ``stems`` the plan must report missing before the
        link (an empty list where the linker names a missing library itself)."""
        ...

    def python_import_library(
        self, python_lib: Path | None, *, limited_api: bool = False
    ) -> Path | None:
        """The Python import library the link needs (``python_lib`` if given; the stable
        ABI's one for a ``limited_api`` build), or ``None`` where the interpreter provides
        libpython at load time. Raises :class:`BuildError`."""
        ...

    def command(self, job: CompileJob, output: Path | str, scratch: Path | str) -> list[str]:
        """The compiler argv of CONTRIBUTING.md's build contract, writing ``output``;
        ``scratch`` is a private directory for what the build writes besides it."""
        ...

    def prepare_scratch(self, job: CompileJob, scratch: Path) -> None:
        """Write into ``scratch`` what :meth:`command` refers to there."""
        ...

    def audit(
        self,
        library: Path,
        torch: TorchFiles,
        backend: Backend | str,
        *,
        cxx: str | Sequence[str] | None = None,
        python_exports: Path | None = None,
        sanitizers: Sequence[Sanitizer] = (),
    ) -> AuditOutcome:
        """Check the linked ``library`` before it is published (``cxx``: the compiler that
        built it, a path or :attr:`Compiler.command`; ``python_exports``: the file exporting
        the target Python's C API, default the running interpreter's; ``sanitizers``: a
        sanitizer build's, whose runtime symbols are then accepted, and only then). Raises
        :class:`..errors.ABIAuditError` (or another :class:`BuildError`)."""
        ...

    def audit_torch_free(
        self,
        library: Path,
        *,
        cc: str | Sequence[str],
        python_exports: Path | None = None,
        sanitizers: Sequence[Sanitizer] = (),
    ) -> AuditOutcome:
        """Check the linked portable ``library`` before it is published: it imports no
        torch symbol and nothing the C runtime and the target Python (``python_exports``)
        do not provide (nor, for a build with ``sanitizers``, their runtime). Raises
        :class:`..errors.ABIAuditError`."""
        ...


def compiler_argv(cxx: str | Sequence[str]) -> list[str]:
    """The argv prefix that runs compiler ``cxx``: a path, or a :attr:`Compiler.command`."""
    return [cxx] if isinstance(cxx, str) else list(cxx)


def _split_command(value: str, path_var: str) -> list[str]:
    """``$CXX`` (or a ``cxx`` string) as an argv prefix.

    The value names an executable as it is (a path with spaces) if one exists under that
    name; otherwise it is a command line split the way a shell would, as CMake and
    setuptools read ``CXX``: ``ccache g++`` or ``g++ -fno-plt``. On Windows the split
    keeps backslashes (``shlex``'s non-POSIX mode) and drops the quotes around a word.
    """
    if shutil.which(value, path=path_var) is not None:
        return [value]
    posix = os.name != "nt"
    try:
        words = shlex.split(value, posix=posix)
    except ValueError as exc:  # an unclosed quote
        raise CompilerNotFoundError(
            f"C++ compiler {value!r} cannot be read as a command ({exc}); quote a path "
            "with spaces, e.g. CXX='\"/opt/my tools/g++\"'"
        ) from None
    if not posix:
        words = [w[1:-1] if len(w) > 1 and w[0] == w[-1] == '"' else w for w in words]
    return words


def locate_compiler(
    cxx: str | os.PathLike[str] | None,
    environ: Mapping[str, str],
    *,
    defaults: tuple[str, ...],
    bad_request: str,
    none_found: str,
    variable: str = "CXX",
) -> tuple[str, tuple[str, ...], str]:
    """``(path, args, origin)`` of the compiler: ``cxx``, else ``$CXX``, else the first of
    ``defaults`` on PATH. A ``cxx`` string and ``$CXX`` are commands
    (:func:`_split_command`: ``ccache g++`` gives the path of ``ccache`` and the args
    ``("g++",)``); a blank ``$CXX`` counts as unset. Raises :class:`CompilerNotFoundError`
    with ``bad_request`` (what to pass instead) or ``none_found`` (how to get one)."""
    path_var = environ.get("PATH", "")
    words: list[str]
    if cxx is not None:
        origin = "the cxx argument"
        words = _split_command(cxx, path_var) if isinstance(cxx, str) else [os.fspath(cxx)]
        requested = os.fspath(cxx)
    elif environ.get(variable, "").strip():
        origin, requested = f"${variable}", environ[variable]
        words = _split_command(requested, path_var)
    else:
        for name in defaults:
            found = shutil.which(name, path=path_var)
            if found is not None:
                return found, (), "PATH"
        raise CompilerNotFoundError(none_found)
    found = shutil.which(words[0], path=path_var) if words and words[0] else None
    if found is None:
        program = f": {words[0]!r}" if words and words[0] != requested else ""
        raise CompilerNotFoundError(
            f"C++ compiler {requested!r} (from {origin}){program} does not exist or is not "
            f"executable; {bad_request}"
        )
    return found, tuple(words[1:]), origin


class WithoutBinaryAudit:
    """:meth:`Toolchain.audit` of a platform without the ELF dual ABI and symbol versions
    (Mach-O, PE): there is nothing to audit after the link."""

    def audit(
        self,
        library: Path,
        torch: TorchFiles,
        backend: Backend | str,
        *,
        cxx: str | Sequence[str] | None = None,
        python_exports: Path | None = None,
        sanitizers: Sequence[Sanitizer] = (),
    ) -> AuditOutcome:
        del library, torch, backend, cxx, python_exports, sanitizers
        return AuditOutcome.NOT_APPLICABLE

    def audit_torch_free(
        self,
        library: Path,
        *,
        cc: str | Sequence[str],
        python_exports: Path | None = None,
        sanitizers: Sequence[Sanitizer] = (),
    ) -> AuditOutcome:
        del library, cc, python_exports, sanitizers
        return AuditOutcome.NOT_APPLICABLE


class LinksLibraryFiles:
    """:meth:`Toolchain.missing_link_libraries` of a linker given each torch library as a
    file (``libc10.dylib`` on macOS, the import library ``c10.lib`` with MSVC): the plan
    names the files ``link_library_name`` gives that ``lib_dir`` lacks, before the link."""

    def link_library_name(self, stem: str) -> str:
        raise NotImplementedError  # each toolchain names its files

    def missing_link_libraries(self, lib_dir: Path, stems: tuple[str, ...]) -> list[str]:
        names = [self.link_library_name(stem) for stem in stems]
        return [name for name in names if not (lib_dir / name).is_file()]
