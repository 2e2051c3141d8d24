"""The msvc toolchain: Windows, MSVC's ``cl.exe`` (compile and link in one call), a DLL.

cl comes from ``$CXX`` or PATH (a VS developer prompt); no other compiler is
accepted. A DLL must resolve every import at link time, so the Python import
library is linked too. Objects, the import library and the ``.exp`` go to the
scratch dir. There is no ABI audit: the link itself resolved every import.
"""

from __future__ import annotations

import os
import re
import sys
import sysconfig
from collections.abc import Mapping
from pathlib import Path

from ..errors import BuildError, CommandError, CompilerNotFoundError
from ..naming import SHARED_LIBRARY_NAMING, free_threaded_build
from ..run import run
from .protocol import (
    CompileJob,
    Compiler,
    LinksLibraryFiles,
    WithoutBinaryAudit,
    locate_compiler,
)
from .sanitizers import Sanitizer

__all__ = ["MSVC", "MsvcToolchain"]

#: cl's banner line; only "Microsoft" and the version are matched, as the rest is localized.
_BANNER_RE = re.compile(r"^.*Microsoft.*?(\d+\.\d+\.\d+(?:\.\d+)?).*$", re.M)
_WANT_MSVC = (
    'run the build from an "x64 Native Tools Command Prompt for VS" (or the MSVC dev '
    "shell; cibuildwheel does not set one up) or install the Visual Studio Build Tools with the "
    '"Desktop development with C++" workload'
)


class MsvcToolchain(WithoutBinaryAudit, LinksLibraryFiles):
    """Windows: cl.exe, ``*.dll`` linked against ``*.lib`` import libraries, no audit."""

    name = "msvc"
    library_prefix, library_suffix = SHARED_LIBRARY_NAMING["msvc"]
    links_torch_python = True
    dual_abi = False
    target_platform: str | None = None  # native: the host's platform
    #: No sanitizer build has been tried with it (:mod:`.sanitizers`).
    sanitizers: frozenset[Sanitizer] = frozenset()
    #: No repair tool runs on Windows wheels (``repair-wheel-command = ""``).
    repair_excludes: tuple[str, ...] = ()

    def find_compiler(
        self, cxx: str | os.PathLike[str] | None, environ: Mapping[str, str]
    ) -> Compiler:
        """MSVC's ``cl``: ``cxx``, else ``$CXX``, else ``cl.exe`` on PATH; identified by
        the banner it prints when run bare."""
        found, args, origin = locate_compiler(
            cxx,
            environ,
            defaults=("cl.exe", "cl"),
            bad_request=f"pass the path of MSVC's cl.exe, or {_WANT_MSVC}",
            none_found=(
                f"no C++ compiler: $CXX is unset and MSVC's cl.exe is not on PATH; {_WANT_MSVC}"
            ),
        )
        if Path(found).stem.lower() != "cl":
            raise CompilerNotFoundError(
                f"{found} (from {origin}) is not MSVC's cl.exe; the Windows build passes cl's "
                "options. Unset CXX or set it to cl.exe"
            )
        # cl has no --version: run without arguments it prints its banner on stderr (and a
        # usage line), and may exit non-zero for lack of input files.
        try:
            proc = run([found, *args], echo=False)
            text = proc.stderr + proc.stdout
        except CommandError as exc:
            text = exc.stderr + exc.stdout
        match = _BANNER_RE.search(text)
        if match is None:
            raise CompilerNotFoundError(
                f"{found} printed no MSVC banner ('Microsoft (R) C/C++ Optimizing Compiler "
                f"Version ...'); is it MSVC's cl.exe? {_WANT_MSVC}"
            )
        return Compiler(
            path=found,
            banner=match.group(0).strip(),
            identity=f"msvc {match.group(1)}",
            args=args,
        )

    def find_c_compiler(
        self, cc: str | os.PathLike[str] | None, environ: Mapping[str, str]
    ) -> Compiler:
        """cl compiles C too (``/TC``): ``cc``, else ``$CC``, else the C++ compiler's
        lookup (``$CXX``, ``cl.exe``)."""
        return self.find_compiler(cc if cc is not None else environ.get("CC") or None, environ)

    def link_library_name(self, stem: str) -> str:
        # The import library shipped next to the DLL (c10.lib beside c10.dll).
        return f"{stem}.lib"

    def python_import_library(
        self, python_lib: Path | None, *, limited_api: bool = False
    ) -> Path | None:
        """``python_lib``, else from ``<installed_base>/libs`` of the running Python (a
        venv's ``sys.prefix`` has no ``libs``; the base installation does):
        ``python3.lib`` for a ``limited_api`` build (the stable ABI's ``python3.dll``,
        so the DLL serves every CPython), else ``python3XY[t].lib``."""
        if python_lib is None:
            base = sysconfig.get_config_var("installed_base") or sys.base_prefix
            free_threaded = "t" if free_threaded_build() else ""
            name = (
                "python3.lib"
                if limited_api
                else f"python{sysconfig.get_config_var('py_version_nodot')}{free_threaded}.lib"
            )
            python_lib = Path(base) / "libs" / name
        if not python_lib.is_file():
            raise BuildError(
                f"no Python import library {python_lib}; a Windows extension must link it. "
                "Use a python.org / nuget CPython (they ship libs/python3XY.lib) or pass "
                "python_lib=<path of python3XY.lib>"
            )
        return python_lib.resolve()

    def command(self, job: CompileJob, output: Path | str, scratch: Path | str) -> list[str]:
        """cl.exe's argv: compile and link in one call; every by-product goes to ``scratch``."""
        python_lib = job.python_import_lib
        if python_lib is None:
            raise BuildError("a Windows build plan needs python_import_lib; use plan_build()")
        # cl reads a trailing separator in /Fo as "a directory, one object per source".
        scratch_dir = f"{scratch}\\"
        implib = f"{scratch_dir}{Path(job.filename).stem}.lib"
        return [
            job.cxx,
            *job.cxx_args,
            "/nologo",
            "/O2",
            "/LD",
            # The DLL runtime, as torch itself is built: objects crossing the boundary
            # (std::string, exceptions) must share one CRT heap.
            "/MD",
            *(
                # Without /Zc:__cplusplus cl reports 199711L and torch's headers misdetect C++17.
                ("/EHsc", "/permissive-", f"/std:{job.std}", "/Zc:__cplusplus")
                if job.language == "c++"
                else ("/TC", f"/std:{job.std}")
            ),
            *(f"/D{d}" for d in job.defines),
            *(f"/I{p}" for p in job.includes),
            *(str(s) for s in job.sources),
            f"/Fo{scratch_dir}",
            f"/Fe{output}",
            "/link",
            *([f"/LIBPATH:{job.lib_dir}"] if job.lib_dir is not None else []),
            *(self.link_library_name(lib) for lib in job.libraries),
            # Unlike ELF and Mach-O, a DLL must resolve every import at link time,
            # libpython's included.
            f"/LIBPATH:{python_lib.parent}",
            python_lib.name,
            # Keep the import library and .exp out of output_dir.
            f"/IMPLIB:{implib}",
        ]

    def prepare_scratch(self, job: CompileJob, scratch: Path) -> None:
        del job, scratch  # cl writes its by-products there itself


MSVC = MsvcToolchain()
