"""What the gnu and darwin toolchains share: a GCC-style compiler driver (g++, clang++).

Its identity comes from the first line of ``--version``; its argv is the flags,
``-D`` defines, ``-I`` includes and sources, ``-o <output>``, the toolchain's link
options, then ``-L<torch>/lib -l<stem>...`` (CONTRIBUTING.md, "Build contract").
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..errors import CommandError, CompilerNotFoundError
from ..run import run
from .protocol import CompileJob, Compiler, locate_compiler
from .sanitizers import compile_flags

__all__ = [
    "FLAGS",
    "find_gcc_style_compiler",
    "gcc_style_command",
    "macro_prefix_maps",
    "toolchain_identity",
]

#: Every GCC-style build compiles and links with these.
FLAGS = ("-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-fvisibility-inlines-hidden")


def toolchain_identity(banner: str, full: str, *, c: bool = False) -> str:
    """The short identity (``g++ 12.2.0``, ``clang 16.0.0``; ``gcc 12.2.0`` for a C
    compiler, ``c``) of a ``--version`` output whose first line is ``banner``."""
    versions = re.findall(r"\d+\.\d+(?:\.\d+)?", banner)
    version = versions[-1] if versions else "unknown"
    if "clang" in banner:
        return f"clang {version}"
    if "Free Software Foundation" in full:
        return f"{'gcc' if c else 'g++'} {version}"
    return f"{banner.split(maxsplit=1)[0] if banner else 'unknown'} {version}"


def find_gcc_style_compiler(
    cxx: str | os.PathLike[str] | None,
    environ: Mapping[str, str],
    *,
    install_hint: str,
    c: bool = False,
) -> Compiler:
    """``cxx``, else ``$CXX``, else ``c++``/``g++`` on PATH, identified by ``--version``.

    ``$CXX`` may be a command (``ccache g++``, ``g++ -fno-plt``): see
    :func:`.protocol.locate_compiler`. ``install_hint`` says how to get a compiler on this
    platform. Raises :class:`CompilerNotFoundError`, with what the program printed, when
    ``--version`` fails or prints nothing (``CXX=/bin/true`` is no compiler).
    """
    variable, defaults, what = ("CC", ("cc", "gcc"), "C") if c else ("CXX", ("c++", "g++"), "C++")
    found, args, origin = locate_compiler(
        cxx,
        environ,
        defaults=defaults,
        bad_request=f"pass the path of {'gcc/clang' if c else 'g++/clang++'} or install one "
        f"({install_hint})",
        none_found=(
            f"no {what} compiler: ${variable} is unset and neither {defaults[0]} nor "
            f"{defaults[1]} is on PATH; {install_hint} or set {variable}=/path/to/compiler"
        ),
        variable=variable,
    )
    shown = shlex.join([found, *args])
    fix = "is it a C++ compiler? Set CXX to g++ or clang++ (a wrapper such as 'ccache g++' works)"
    try:
        proc = run([found, *args, "--version"], echo=False)
    except CommandError as exc:
        raise CompilerNotFoundError.from_command(
            f"C++ compiler {shown} (from {origin}) does not work: '{shown} --version' failed",
            exc,
            fix=fix,
        ) from None
    lines = [line.strip() for line in proc.stdout.splitlines() if line.strip()]
    if not lines:
        raise CompilerNotFoundError(
            f"C++ compiler {shown} (from {origin}): '{shown} --version' printed nothing; {fix}"
        )
    banner = lines[0]
    return Compiler(
        path=found, banner=banner, identity=toolchain_identity(banner, proc.stdout, c=c), args=args
    )


def macro_prefix_maps(job: CompileJob) -> list[str]:
    """``-fmacro-prefix-map`` options that make the paths ``__FILE__`` puts into the
    library relative: to its include directory for a header (``c10/util/Exception.h``),
    ``csrc/...`` for a source.

    c10's inline code names its header in every assertion message it carries: with the
    build machine's absolute paths (a torch environment deep in a cache) they were ~4 KiB
    of a 72 KiB library, which every import reads, hashes and copies, and they made the
    library's bytes depend on where it was built. GCC >= 8 and clang >= 10 take the
    option. A directory inside another comes after it (GCC applies the last matching
    map, clang the longest); otherwise the order is the includes', then the sources':
    never the paths' lengths, which differ from venv to venv, so the JIT cache key (the
    command with each location replaced) stays one for every venv of a torch build. A
    directory whose path holds ``=`` (the option's separator) is left as it is.
    """
    maps = {os.path.join(str(path), ""): "" for path in job.includes}
    maps[os.path.join(str(job.source_dir), "")] = os.path.join(job.source_dir.name, "")

    def depth(directory: str) -> int:  # how many of the other directories hold it
        return sum(other != directory and directory.startswith(other) for other in maps)

    ordered = sorted(maps.items(), key=lambda item: depth(item[0]))  # stable
    return [f"-fmacro-prefix-map={old}={new}" for old, new in ordered if "=" not in old]


def gcc_style_command(
    job: CompileJob,
    output: Path | str,
    *,
    extra_flags: Sequence[str] = (),
    link: Sequence[str] = (),
) -> list[str]:
    """The argv of one compile-and-link call; ``link`` options follow ``-o <output>``,
    before the libraries they apply to. A sanitizer build (``job.sanitizers``) adds
    :func:`.sanitizers.compile_flags` after the common flags."""
    # -fvisibility-inlines-hidden is C++'s (a C compile warns about it).
    flags = FLAGS if job.language == "c++" else FLAGS[:-1]
    return [
        job.cxx,
        *job.cxx_args,
        *flags,
        *compile_flags(job.sanitizers),
        *extra_flags,
        f"-std={job.std}",
        *(f"-D{d}" for d in job.defines),
        *(f"-I{p}" for p in job.includes),
        *macro_prefix_maps(job),
        *(str(s) for s in job.sources),
        "-o",
        str(output),
        *link,
        *([f"-L{job.lib_dir}"] if job.lib_dir is not None else []),
        *(f"-l{lib}" for lib in job.libraries),
    ]
