"""The ELF ABI audit (gnu toolchain): does a library need symbols its torch does not provide?

Linking a shared library succeeds even when some of its symbols are defined
nowhere; the failure shows up later as ``undefined symbol: ...`` at import, on a
user's machine. The classic case is a library compiled with
``_GLIBCXX_USE_CXX11_ABI=1`` against a torch built with ``0``: every function
taking or returning ``std::string`` is mangled differently. The audit compares
the library's undefined dynamic symbols with what torch's libraries, the C/C++
runtime and the Python interpreter export, before the library is published.

Symbols are read with ``nm -D`` (binutils ships with every compiler this driver
can use). Measured on ``libtorch_cpu.so`` of torch 2.6.0 (442 MB, 84k exported
symbols): ``nm -D`` 0.14 s, pyelftools 2.3 s; so the audit adds no dependency
and costs well under a second per library.

The audit applies to ELF (Linux) only: the gnu toolchain runs it, the others
report :attr:`~.protocol.AuditOutcome.NOT_APPLICABLE` rather than pretending to
pass. :func:`dynamic_symbols` also tells torch's C++ ABI from ``libc10.so``
(:mod:`..torchinstall`).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import sys
import sysconfig
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..errors import ABIAuditError, BuildError, CommandError, CompilerNotFoundError
from ..naming import Backend, parse_backend
from ..run import run
from .protocol import TorchFiles, compiler_argv
from .sanitizers import Sanitizer, accepted_runtime_symbol

__all__ = [
    "audit_elf_library",
    "audit_torch_free_library",
    "dynamic_symbols",
    "run_time_symbols",
    "runtime_libraries",
    "undefined_symbols_not_provided",
]

#: The C/C++ runtime libraries every Linux process may resolve symbols from.
_RUNTIME_SONAMES = (
    "libstdc++.so.6",
    "libgcc_s.so.1",
    "libc.so.6",
    "libm.so.6",
    "libpthread.so.0",
    "libdl.so.2",
    "ld-linux-x86-64.so.2",
    "ld-linux-aarch64.so.1",
)
#: The torch library csrc/ does not link on Linux but looks symbols up in at run time
#: (csrc/tcde_python.h): a symbol only it provides would fail the RTLD_NOW load, and the
#: names it is asked for must be among its exports.
_RUN_TIME_PROVIDER = "libtorch_python.so"
#: Those names, as they lie NUL-terminated among the library's constants.
_RUN_TIME_NAMES = re.compile(
    rb"(?<=\0)(THPVariableClass|ParameterClass|_Z\d+THPVariable_Wrap\w*)(?=\0)"
)
#: How many missing symbols an error message lists before summarising the rest.
_SHOWN = 20


def _nm() -> str:
    found = shutil.which("nm")
    if found is None:
        raise CompilerNotFoundError(
            "'nm' (binutils) is not on PATH; the ABI audit and the torch ABI detection read "
            "dynamic symbols with it. Install binutils (it comes with gcc/g++)"
        )
    return found


@functools.lru_cache(maxsize=256)
def _dynamic_symbols_cached(path: str, size: int, mtime_ns: int, defined: bool) -> frozenset[str]:
    # size and mtime are part of the key so a rebuilt file is read again.
    del size, mtime_ns
    flag = "--defined-only" if defined else "--undefined-only"
    proc = run([_nm(), "-D", flag, path], echo=False)
    names: set[str] = set()
    for line in proc.stdout.splitlines():
        parts = line.split()
        if not parts:
            continue
        kind, name = (parts[-2], parts[-1]) if len(parts) >= 2 else ("", parts[-1])
        # Weak undefined symbols (``w``/``v``) may legitimately stay unresolved.
        if not defined and kind != "U":
            continue
        names.add(name.split("@", 1)[0])
    return frozenset(names)


def dynamic_symbols(path: Path, *, defined: bool) -> frozenset[str]:
    """Dynamic symbol names of an ELF file (``@VERSION`` stripped).

    ``defined=True``: what the file exports; ``False``: what it needs (strong
    undefined symbols only). Cached per (path, size, mtime) within the process,
    because torch's libraries are hundreds of MB and every audit reads them.
    """
    stat = path.stat()
    return _dynamic_symbols_cached(str(path.resolve()), stat.st_size, stat.st_mtime_ns, defined)


def _print_file_name(cxx: str | Sequence[str], soname: str) -> Path | None:
    try:
        proc = run([*compiler_argv(cxx), f"-print-file-name={soname}"], echo=False)
    except CommandError:
        return None
    found = Path(proc.stdout.strip())
    # The compiler echoes the bare name back when it does not know the file.
    return found.resolve() if found.is_absolute() and found.is_file() else None


def _python_exports_source() -> Path:
    """The file exporting the C API of this interpreter: libpython, or the static executable."""
    if sysconfig.get_config_var("Py_ENABLE_SHARED"):
        libdir = str(sysconfig.get_config_var("LIBDIR") or "")
        for var in ("INSTSONAME", "LDLIBRARY"):
            name = str(sysconfig.get_config_var(var) or "")
            if libdir and name and (Path(libdir) / name).is_file():
                return Path(libdir) / name
    return Path(os.path.realpath(sys.executable))


def runtime_libraries(
    cxx: str | Sequence[str], python_exports: Path | None = None
) -> tuple[Path, ...]:
    """libstdc++, libgcc_s, libc, libm, libpthread, libdl and the dynamic loader, as located by
    the compiler (``-print-file-name``), plus the Python C API exporter:
    ``python_exports``, else the running interpreter's libpython or executable."""
    found = [_print_file_name(cxx, soname) for soname in _RUNTIME_SONAMES]
    python = python_exports if python_exports is not None else _python_exports_source()
    return (*dict.fromkeys(p for p in found if p is not None), python)


def _torch_libraries(torch: TorchFiles, backend: Backend) -> list[Path]:
    # A CPU library must not lean on the GPU libraries: they are absent from CPU wheels.
    # Nor on libtorch_python, which the gnu toolchain does not link (see _RUN_TIME_PROVIDER).
    other_gpu = {Backend.CPU: ("cuda", "hip"), Backend.CUDA: ("hip",), Backend.ROCM: ("cuda",)}
    excluded = other_gpu[backend]
    return sorted(
        path
        for path in torch.lib_dir.glob("*.so*")
        if path.is_file()
        and path.name != _RUN_TIME_PROVIDER
        and not any(tag in path.name for tag in excluded)
    )


def run_time_symbols(library: Path) -> frozenset[str]:
    """The torch_python names ``library`` looks up at run time (dlsym), read from its
    bytes: csrc/tcde_python.h's ``THPVariableClass``, ``ParameterClass`` and the
    mangled ``THPVariable_Wrap`` of its torch version."""
    return frozenset(m.decode() for m in _RUN_TIME_NAMES.findall(library.read_bytes()))


def undefined_symbols_not_provided(
    library: Path,
    torch: TorchFiles,
    backend: Backend | str,
    *,
    cxx: str | Sequence[str],
    python_exports: Path | None = None,
    sanitizers: Sequence[Sanitizer] = (),
) -> tuple[str, ...]:
    """Sorted undefined dynamic symbols of ``library`` that nothing at load time provides,
    and the names it looks up at run time (:func:`run_time_symbols`) that torch's
    ``libtorch_python.so`` does not export.

    "Provided" means exported by a library in ``torch/lib`` other than libtorch_python
    (GPU libraries only for a GPU ``backend``), by the C/C++ runtime the compiler ``cxx``
    links against, or by the target Python (``python_exports``, default this
    interpreter); for a sanitizer build (``sanitizers``), also the runtime symbols of
    those sanitizers (:func:`.sanitizers.accepted_runtime_symbol`), which the preloaded
    runtime provides. Raises :class:`CommandError` when ``nm`` fails.
    """
    backend = parse_backend(backend)
    missing_at_run_time = _run_time_symbols_not_provided(library, torch)
    needed = _without_runtime_symbols(dynamic_symbols(library, defined=False), sanitizers)
    if not needed:
        return missing_at_run_time
    providers = [*_torch_libraries(torch, backend), *runtime_libraries(cxx, python_exports)]
    # Smallest first: the search usually ends before the 0.5-1 GB libtorch_cuda is read.
    providers.sort(key=lambda path: path.stat().st_size)
    missing = set(needed)
    for provider in providers:
        missing -= dynamic_symbols(provider, defined=True)
        if not missing:
            break
    return tuple(sorted(missing.union(missing_at_run_time)))


def _without_runtime_symbols(
    names: frozenset[str], sanitizers: Sequence[Sanitizer]
) -> frozenset[str]:
    """``names`` less those a sanitizer build's runtime provides (none are, without
    ``sanitizers``: then a ``__asan_*`` import is missing like any other)."""
    if not sanitizers:
        return names
    return frozenset(name for name in names if not accepted_runtime_symbol(name, sanitizers))


def _run_time_symbols_not_provided(library: Path, torch: TorchFiles) -> tuple[str, ...]:
    # A name csrc/ would dlsym that torch's libtorch_python does not export: the library
    # would load and then refuse to hand out its table. Found here, at build time.
    wanted = run_time_symbols(library)
    if not wanted:
        return ()
    provider = torch.lib_dir / _RUN_TIME_PROVIDER
    exported = dynamic_symbols(provider, defined=True) if provider.is_file() else frozenset()
    return tuple(sorted(wanted - exported))


def _demangle(names: Iterable[str]) -> list[str]:
    names = list(names)
    tool = shutil.which("c++filt")
    if tool is None or not names:
        return names
    try:
        proc = run([tool, *names], echo=False)
    except CommandError:
        return names
    lines = proc.stdout.splitlines()
    return lines if len(lines) == len(names) else names


def _sanitizer_cause(missing: Iterable[str]) -> str | None:
    """The likely cause when a library imports sanitizer runtime symbols but was audited
    as a library to ship."""
    found = [
        member
        for member in Sanitizer
        if any(accepted_runtime_symbol(n, (member,)) for n in missing)
    ]
    if not found:
        return None
    names = ",".join(member.value for member in found)
    return (
        f"it was compiled with -fsanitize={names} (its runtime's symbols are imported), "
        "which no library to ship is; for a sanitizer build pass sanitizers="
        f"{names!r} to the build request, which also names the file for it"
    )


def _likely_cause(missing: tuple[str, ...], torch: TorchFiles) -> str:
    sanitized = _sanitizer_cause(missing)
    if sanitized is not None:
        return sanitized
    version = torch.version
    if torch.cxx11_abi is False and any("B5cxx11" in name for name in missing):
        return (
            f"built with _GLIBCXX_USE_CXX11_ABI=1 but torch {version} uses 0; "
            "rebuild with cxx11_abi=False (the driver's default reads it from the install)"
        )
    # Old-ABI std::string mangles as "Ss" / "NSs"; the C++11 one never does.
    if torch.cxx11_abi is True and any(
        name.startswith("_Z") and "Ss" in name and "B5cxx11" not in name for name in missing
    ):
        return (
            f"built with _GLIBCXX_USE_CXX11_ABI=0 but torch {version} uses 1; "
            "rebuild with cxx11_abi=True (the driver's default reads it from the install)"
        )
    return (
        f"the library was compiled against other torch headers than torch {version} at "
        f"{torch.root}, or a needed -l flag is missing; rebuild it against this installation"
    )


def audit_elf_library(
    library: Path,
    torch: TorchFiles,
    backend: Backend | str,
    *,
    cxx: str | Sequence[str],
    python_exports: Path | None = None,
    sanitizers: Sequence[Sanitizer] = (),
) -> None:
    """Check that every symbol ``library`` needs is provided at load time
    (``python_exports``: the target interpreter's libpython or executable; ``sanitizers``:
    a sanitizer build's, whose runtime symbols are accepted then and only then).

    Raises :class:`ABIAuditError` listing the missing symbols (demangled when
    ``c++filt`` is available) and the likely cause, or :class:`BuildError` when
    the symbols cannot be read.
    """
    try:
        missing = undefined_symbols_not_provided(
            library,
            torch,
            backend,
            cxx=cxx,
            python_exports=python_exports,
            sanitizers=sanitizers,
        )
    except CommandError as exc:
        what = f"the ABI audit of {library.name} could not read dynamic symbols"
        raise BuildError.from_command(what, exc, tail=2000) from None
    if not missing:
        return
    shown = _demangle(missing[:_SHOWN])
    more = f"\n  ... and {len(missing) - _SHOWN} more" if len(missing) > _SHOWN else ""
    listing = "\n".join(f"  {name}" for name in shown)
    raise ABIAuditError(
        f"{library.name} needs {len(missing)} symbol(s) that torch {torch.version} "
        f"({torch.root}) and the C/C++/Python runtime do not provide:\n{listing}{more}\n"
        f"likely cause: {_likely_cause(missing, torch)}",
        missing,
    )


#: The name stems of torch's libraries: a portable library may need none of them.
_TORCH_LIBRARY_STEMS = (b"libtorch", b"libc10", b"libshm")


def needed_libraries(library: Path) -> tuple[str, ...]:
    """The ``DT_NEEDED`` entries of an ELF library (``readelf -d``; ``objdump -p`` where
    readelf is missing)."""
    tool = shutil.which("readelf")
    command = (
        [tool, "-d", str(library)]
        if tool
        else [shutil.which("objdump") or "objdump", "-p", str(library)]
    )
    proc = run(command, echo=False)
    return tuple(re.findall(r"NEEDED\)?\s+(?:Shared library: \[)?([^\]\s]+)", proc.stdout))


def audit_torch_free_library(
    library: Path,
    *,
    cc: str | Sequence[str],
    python_exports: Path | None = None,
    sanitizers: Sequence[Sanitizer] = (),
) -> None:
    """The portable library's audit: it needs no torch library (``DT_NEEDED``) and every
    undefined symbol it has is provided by the C runtime (``cc``'s) or the target Python
    (``python_exports``, default this interpreter), so it imports no torch symbol; in a
    sanitizer build (``sanitizers``) the runtime symbols of those sanitizers are accepted
    too, and only there. Raises :class:`ABIAuditError`, or :class:`BuildError` when the
    symbols cannot be read."""
    try:
        torch_needed = [
            name
            for name in needed_libraries(library)
            if name.encode().startswith(_TORCH_LIBRARY_STEMS)
        ]
        needed = _without_runtime_symbols(dynamic_symbols(library, defined=False), sanitizers)
        missing = set(needed)
        for provider in runtime_libraries(cc, python_exports):
            missing -= dynamic_symbols(provider, defined=True)
            if not missing:
                break
    except CommandError as exc:
        what = f"the torch-free audit of {library.name} could not read its dynamic section"
        raise BuildError.from_command(what, exc, tail=2000) from None
    if not torch_needed and not missing:
        return
    listing = "\n".join(f"  {name}" for name in sorted(missing)[:_SHOWN])
    raise ABIAuditError(
        f"{library.name} is the portable library, built against no torch, but it "
        + (f"needs torch's {', '.join(torch_needed)}" if torch_needed else "")
        + (" and " if torch_needed and missing else "")
        + (
            f"imports {len(missing)} symbol(s) that the C runtime and Python do not "
            f"provide:\n{listing}"
            if missing
            else ""
        )
        + "\nlikely cause: "
        + (
            _sanitizer_cause(missing)
            or "a torch header or library in its build; it may include only Python.h and "
            "dlpack/dlpack.h"
        ),
        tuple(sorted(missing)),
    )
