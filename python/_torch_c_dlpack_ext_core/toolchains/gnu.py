"""The gnu toolchain: Linux, a GCC-style compiler (g++ or clang++) and GNU ld, ELF output.

Links with ``-Wl,--strip-all`` and the source dir's ``exports.map`` as version
script, reads torch's libstdc++ dual ABI, and audits each library's undefined
dynamic symbols (:mod:`.elf`) before it is published.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..naming import SHARED_LIBRARY_NAMING, Backend
from .elf import audit_elf_library, audit_torch_free_library
from .protocol import AuditOutcome, CompileJob, Compiler, TorchFiles
from .sanitizers import Sanitizer
from .unix import find_gcc_style_compiler, gcc_style_command

__all__ = ["GNU", "GnuToolchain"]


class GnuToolchain:
    """Linux: g++/clang++, ``lib*.so``, the ELF ABI audit."""

    name = "gnu"
    library_prefix, library_suffix = SHARED_LIBRARY_NAMING["gnu"]
    links_torch_python = False  # csrc/tcde_python.h: resolved at run time
    dual_abi = True
    target_platform: str | None = None  # native: the host's platform
    #: GCC's (and clang's) ASan and UBSan; checked with GCC 12 on Linux x86_64
    #: (tests/integration/test_sanitizers.py).
    sanitizers = frozenset(Sanitizer)
    #: auditwheel's ``--exclude`` list; ``[tool.cibuildwheel.linux] repair-wheel-command``
    #: in pyproject.toml repeats it (TOML cannot import it) and a unit test keeps them equal.
    repair_excludes = (
        "libc10.so",
        "libc10_cuda.so",
        "libc10_hip.so",
        "libtorch.so",
        "libtorch_cpu.so",
        "libtorch_cuda.so",
        "libtorch_hip.so",
        "libtorch_python.so",
        "libcudart.so.*",
        "libamdhip64.so.*",
    )

    def find_compiler(
        self, cxx: str | os.PathLike[str] | None, environ: Mapping[str, str]
    ) -> Compiler:
        return find_gcc_style_compiler(cxx, environ, install_hint="apt install g++")

    def find_c_compiler(
        self, cc: str | os.PathLike[str] | None, environ: Mapping[str, str]
    ) -> Compiler:
        return find_gcc_style_compiler(cc, environ, install_hint="apt install gcc", c=True)

    def link_library_name(self, stem: str) -> str:
        return f"{self.library_prefix}{stem}{self.library_suffix}"

    def missing_link_libraries(self, lib_dir: Path, stems: tuple[str, ...]) -> list[str]:
        # -l lets the linker report a missing library itself (and the tests' fake torch
        # trees hold only some of them).
        del lib_dir, stems
        return []

    def python_import_library(
        self, python_lib: Path | None, *, limited_api: bool = False
    ) -> Path | None:
        # libpython is not linked: the interpreter provides it at load time.
        del python_lib, limited_api
        return None

    def command(self, job: CompileJob, output: Path | str, scratch: Path | str) -> list[str]:
        del scratch  # GNU ld writes nothing besides the library
        # The symbol table is not needed to load or call the library: a fifth of its
        # compressed size, at no cost in speed (measured, see CONTRIBUTING.md). A sanitizer
        # build keeps it, and its line tables, for its reports to name functions and lines.
        link = [] if job.sanitizers else ["-Wl,--strip-all"]
        # One read-only and one writable load segment instead of four (code apart from
        # data by page): a library ~10% smaller to read, hash and copy on every import,
        # and two fewer mappings for dlopen (docs/facts.md, "What one import pays for").
        link.append("-Wl,-z,noseparate-code")
        version_script = job.exports_map
        if version_script.is_file():
            # Hides what -fvisibility cannot: symbols torch's headers force to default.
            link.append(f"-Wl,--version-script={version_script}")
        # dlopen/dlsym, with which csrc/ finds its torch_python symbols (links_torch_python):
        # in libdl.so.2 before glibc 2.34; since then libc.so.6 has them and -ldl finds
        # only an empty libdl.a, adding nothing.
        link.append("-ldl")
        return gcc_style_command(job, output, link=link)

    def prepare_scratch(self, job: CompileJob, scratch: Path) -> None:
        del job, scratch

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
        """The ELF audit (:func:`.elf.audit_elf_library`); ``cxx`` (default: the one
        :meth:`find_compiler` finds) locates the C/C++ runtime the library links."""
        compiler = cxx if cxx is not None else self.find_compiler(None, os.environ).command
        audit_elf_library(
            library,
            torch,
            backend,
            cxx=compiler,
            python_exports=python_exports,
            sanitizers=sanitizers,
        )
        return AuditOutcome.PASSED

    def audit_torch_free(
        self,
        library: Path,
        *,
        cc: str | Sequence[str],
        python_exports: Path | None = None,
        sanitizers: Sequence[Sanitizer] = (),
    ) -> AuditOutcome:
        """:func:`.elf.audit_torch_free_library`: no torch library needed, every symbol
        provided by the C runtime or the target Python (or a sanitizer build's runtime)."""
        audit_torch_free_library(
            library, cc=cc, python_exports=python_exports, sanitizers=sanitizers
        )
        return AuditOutcome.PASSED


GNU = GnuToolchain()
