"""The darwin toolchain: macOS, clang and ld64, Mach-O ``.dylib`` output.

libpython is not linked (``-undefined dynamic_lookup``: the interpreter provides it).
ld64 has no version scripts, so the names of ``exports.map`` become an export list
in the scratch dir. There is no ELF ABI audit here: no dual ABI, no symbol versions;
the wheel job's load test is the check.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from ..errors import BuildError
from ..naming import SHARED_LIBRARY_NAMING
from .protocol import (
    VERSION_SCRIPT,
    CompileJob,
    Compiler,
    LinksLibraryFiles,
    WithoutBinaryAudit,
)
from .sanitizers import Sanitizer
from .unix import find_gcc_style_compiler, gcc_style_command

__all__ = ["DARWIN", "DarwinToolchain", "exported_symbols"]

#: In the scratch dir: ld64's export list, generated from the version script (one list).
EXPORT_LIST = "exports.darwin.txt"


def exported_symbols(source_dir: Path) -> tuple[str, ...]:
    """The names ``exports.map`` lists under ``global:`` (the library's whole interface)."""
    text = (source_dir / VERSION_SCRIPT).read_text(encoding="utf-8")
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    match = re.search(r"global:(.*?)local:", text, re.S)
    names = re.findall(r"([A-Za-z_]\w*)\s*;", match.group(1)) if match else []
    if not names:
        raise BuildError(
            f"{source_dir / VERSION_SCRIPT} names no symbol under 'global:'; "
            "list the exported functions there (see CONTRIBUTING.md, Build contract)"
        )
    return tuple(names)


class DarwinToolchain(WithoutBinaryAudit, LinksLibraryFiles):
    """macOS: clang, ``lib*.dylib``, no audit."""

    name = "darwin"
    library_prefix, library_suffix = SHARED_LIBRARY_NAMING["darwin"]
    links_torch_python = True
    dual_abi = False
    target_platform: str | None = None  # native: the host's platform
    #: No sanitizer build has been tried with it (:mod:`.sanitizers`).
    sanitizers: frozenset[Sanitizer] = frozenset()
    #: delocate's ``--exclude`` list (CPU builds only: no CUDA / ROCm on macOS);
    #: ``[tool.cibuildwheel.macos] repair-wheel-command`` in pyproject.toml repeats it.
    repair_excludes = (
        "libc10.dylib",
        "libtorch.dylib",
        "libtorch_cpu.dylib",
        "libtorch_python.dylib",
    )

    def find_compiler(
        self, cxx: str | os.PathLike[str] | None, environ: Mapping[str, str]
    ) -> Compiler:
        return find_gcc_style_compiler(
            cxx,
            environ,
            install_hint="install the Xcode Command Line Tools (xcode-select --install)",
        )

    def find_c_compiler(
        self, cc: str | os.PathLike[str] | None, environ: Mapping[str, str]
    ) -> Compiler:
        return find_gcc_style_compiler(
            cc,
            environ,
            install_hint="install the Xcode Command Line Tools (xcode-select --install)",
            c=True,
        )

    def link_library_name(self, stem: str) -> str:
        return f"{self.library_prefix}{stem}{self.library_suffix}"

    def python_import_library(
        self, python_lib: Path | None, *, limited_api: bool = False
    ) -> Path | None:
        del python_lib, limited_api
        return None

    def command(self, job: CompileJob, output: Path | str, scratch: Path | str) -> list[str]:
        link: list[str] = []
        if job.exports_map.is_file():
            # ld64 has no version scripts: the same names, as an export list.
            link.append(f"-Wl,-exported_symbols_list,{Path(scratch) / EXPORT_LIST}")
        # -x drops the local symbols from the symbol table, as --strip-all does on Linux.
        link.append("-Wl,-x")
        # No -rpath: the library is only loaded after ``import torch``, and dyld binds
        # its @rpath/libc10.dylib etc. to the images torch already loaded (same install
        # names). Our own install name is @rpath-relative for the same reason.
        link.append(f"-Wl,-install_name,@rpath/{job.filename}")
        # libpython is not linked (the interpreter provides it): let the loader bind it.
        return gcc_style_command(
            job, output, extra_flags=("-undefined", "dynamic_lookup"), link=link
        )

    def prepare_scratch(self, job: CompileJob, scratch: Path) -> None:
        if job.exports_map.is_file():
            # Mach-O C symbols carry a leading underscore; the export list names them so.
            names = exported_symbols(job.exports_map.parent)
            (scratch / EXPORT_LIST).write_text(
                "".join(f"_{name}\n" for name in names), encoding="utf-8"
            )


DARWIN = DarwinToolchain()
