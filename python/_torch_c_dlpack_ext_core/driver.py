"""The ONE compiler driver: compile ``csrc/`` against a given torch installation.

``nox -s build``, the sdist build and the opt-in JIT all call
:func:`compile_library`. It follows the build contract in CONTRIBUTING.md
(include order, defines, flags, links), takes every fact about the target from
the torch installation's files (never from whether torch imports here), and:

* fails early with a typed error naming what is wrong and how to fix it;
* builds under a lock (``<library>.lock``) so concurrent builds of one target
  do the work once;
* compiles to a temporary name, audits the result (:mod:`.audit`), then
  renames it into place, so a failed or killed build never leaves a library
  at the output path;
* records a cache key in ``<library>.build.json``: an unchanged target
  returns the recorded :class:`ManifestEntry` without compiling.

Command line::

    python -m _torch_c_dlpack_ext_core.driver --torch PATH --backend cpu --output-dir DIR
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import re
import shutil
import sys
import sysconfig
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .audit import AuditOutcome, audit_library
from .errors import (
    ABIMismatchError,
    BackendUnavailableError,
    BuildError,
    CommandError,
    CompilerNotFoundError,
    DLPackHeaderNotFoundError,
    GPUHeadersNotFoundError,
    ManifestError,
    TorchCDLPackExtError,
    TorchInstallError,
)
from .manifest import ManifestEntry, atomic_write_bytes, sha256_of, verify_file
from .naming import Backend, host_platform_tag, library_filename, parse_backend
from .run import run
from .torchinstall import TorchInstall, link_library_name

__all__ = [
    "BuildPlan",
    "check_tensor_layout",
    "compile_library",
    "cuda_header_wheels",
    "exported_symbols",
    "find_compiler",
    "find_dlpack_include",
    "find_gpu_toolkit",
    "find_sources",
    "main",
    "plan_build",
]

#: Bump when the driver changes what it produces, so old cache records stop matching.
_CACHE_SCHEMA = 1
#: The oldest DLPack header that defines ``DLPackExchangeAPI``.
_MIN_DLPACK = (1, 2)
#: Torch's CMake config asks dependents for C++20 from 2.12 on (``CXX_STANDARD 20`` in
#: TorchConfig.cmake of PyPI's 2.12.0-2.15.0; 17 in 2.10.0 and 2.11.0).
_CXX20_FROM = (2, 12)
_CUDA_MARKER = "cuda_runtime_api.h"
_CUDA_CRT = "crt/host_defines.h"
_HIP_MARKER = "hip/hip_runtime_api.h"
#: csrc/ declares the head of torch's ``THPVariable`` itself (``tcde_python.h``); the driver
#: checks the installation's header against it before compiling such sources.
_LAYOUT_HEADER = "tcde_python.h"
_TORCH_VARIABLE_HEADER = "torch/csrc/autograd/python_variable.h"
#: The head of ``struct THPVariable`` (comments and blanks removed) per torch minor range,
#: read from python_variable.h of PyPI's wheels: 2.4.1, 2.5.1, 2.6.0, 2.7.1, 2.8.0, 2.9.1
#: hold a ``c10::MaybeOwned<at::Tensor>``; 2.10.0, 2.11.0, 2.12.0, 2.12.1, 2.13.0, 2.14.0,
#: 2.14.1 and 2.15.0 the tensor itself. Keep in step with csrc/tcde_python.h.
_THPVARIABLE_HEADS: tuple[tuple[tuple[int, int], tuple[int, int], str], ...] = (
    ((2, 4), (2, 9), "PyObject_HEAD c10::MaybeOwned<at::Tensor> cdata;"),
    ((2, 10), (2, 15), "PyObject_HEAD at::Tensor cdata;"),
)
_SOURCE_SUFFIXES = (".cc", ".cpp", ".h", ".hpp", ".inc", ".map")
#: In the source dir: the linker version script naming the only exported symbols.
_VERSION_SCRIPT = "exports.map"
#: In the scratch dir: ld64's export list, generated from the version script (one list).
_DARWIN_EXPORTS = "exports.darwin.txt"
#: Stands for the per-build scratch directory in commands that are only hashed or shown.
_SCRATCH_PLACEHOLDER = "{scratch}"
#: cl's banner line; only "Microsoft" and the version are matched, as the rest is localized.
_MSVC_BANNER_RE = re.compile(r"^.*Microsoft.*?(\d+\.\d+\.\d+(?:\.\d+)?).*$", re.M)
_WANT_MSVC = (
    'run the build from an "x64 Native Tools Command Prompt for VS" (or the MSVC dev '
    "shell; cibuildwheel does not set one up) or install the Visual Studio Build Tools with the "
    '"Desktop development with C++" workload'
)
#: A build of one target taking longer than this means a stuck holder of the lock.
_LOCK_TIMEOUT_S = 3600.0
_WANT_DLPACK = (
    "pass dlpack_include=<dir holding dlpack/dlpack.h> or install apache-tvm-ffi, "
    "which ships DLPack 1.3 ('pip install apache-tvm-ffi')"
)


def _torch_libraries(backend: Backend) -> list[str]:
    """The torch libraries the exchange library links, by stem (``c10``)."""
    libs = ["c10", "torch_cpu", "torch", "torch_python"]
    if backend is Backend.CUDA:
        libs += ["c10_cuda", "torch_cuda"]
    elif backend is Backend.ROCM:
        libs += ["c10_hip", "torch_hip"]
    return libs


@dataclasses.dataclass(frozen=True)
class BuildPlan:
    """Everything one compile needs, resolved and validated; builds nothing by itself."""

    torch: TorchInstall
    backend: Backend
    cxx11_abi: bool | None
    cxx: str
    #: First line of ``<cxx> --version`` (part of the cache key).
    compiler_banner: str
    #: Short compiler identity recorded in the library and manifest (``g++ 12.2.0``).
    toolchain: str
    std: str
    dlpack_include: Path
    dlpack_version: str
    python_include: Path
    #: CUDA / ROCm include dirs (two for NVIDIA's wheels: cuda_runtime and cuda_nvcc's crt/).
    gpu_includes: tuple[Path, ...]
    gpu_toolkit: str | None
    sources: tuple[Path, ...]
    source_dir: Path
    output_dir: Path
    platform: str
    #: Windows only: the target Python's import library (``<base>/libs/python311.lib``).
    python_import_lib: Path | None = None

    @property
    def filename(self) -> str:
        return library_filename(
            self.torch.major,
            self.torch.minor,
            self.backend,
            self.cxx11_abi,
            platform=self.platform,
        )

    @property
    def output(self) -> Path:
        return self.output_dir / self.filename

    @property
    def sidecar(self) -> Path:
        return self.output_dir / f"{self.filename}.build.json"

    def _defines(self) -> list[str]:
        torch = self.torch
        defines = [f"TCDE_BACKEND_{self.backend.value.upper()}"]
        if self.backend is Backend.ROCM:
            defines += ["USE_ROCM", "__HIP_PLATFORM_AMD__"]
        if self.cxx11_abi is not None:
            defines.append(f"_GLIBCXX_USE_CXX11_ABI={int(self.cxx11_abi)}")
        # The quotes are part of the argv element: POSIX exec passes them as they are, and on
        # Windows subprocess escapes them (\") so cl's command-line parser restores them.
        return [
            *defines,
            f'TCDE_TORCH_BUILD="{torch.version}"',
            f'TCDE_TOOLCHAIN="{self.toolchain}"',
            f'TCDE_GPU_TOOLKIT="{self.gpu_toolkit or ""}"',
        ]

    def _libraries(self) -> list[str]:
        return _torch_libraries(self.backend)

    def command(self, output: Path | str, scratch: Path | str = _SCRATCH_PLACEHOLDER) -> list[str]:
        """The compiler argv of CONTRIBUTING.md's build contract, writing ``output``.

        ``scratch``: a private directory for what the build writes besides the
        library (MSVC's objects, import library and .exp; the macOS export list).
        Linux uses none.
        """
        if self.platform.startswith("win"):
            return self._msvc_command(output, scratch)
        torch = self.torch
        includes = [self.dlpack_include, *torch.include_dirs, self.python_include]
        includes += self.gpu_includes
        flags = ["-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-fvisibility-inlines-hidden"]
        link: list[str] = []
        if self.platform.startswith("darwin"):
            # libpython is not linked (the interpreter provides it): let the loader bind it.
            flags += ["-undefined", "dynamic_lookup"]
            if (self.source_dir / _VERSION_SCRIPT).is_file():
                # ld64 has no version scripts: the same names, as an export list.
                link.append(f"-Wl,-exported_symbols_list,{Path(scratch) / _DARWIN_EXPORTS}")
            # -x drops the local symbols from the symbol table, as --strip-all does on Linux.
            link.append("-Wl,-x")
            # No -rpath: the library is only loaded after ``import torch``, and dyld binds
            # its @rpath/libc10.dylib etc. to the images torch already loaded (same install
            # names). Our own install name is @rpath-relative for the same reason.
            link.append(f"-Wl,-install_name,@rpath/{self.filename}")
        elif self.platform.startswith("linux"):
            # The symbol table is not needed to load or call the library: a fifth of
            # its compressed size, at no cost in speed (measured, see CONTRIBUTING.md).
            link.append("-Wl,--strip-all")
            version_script = self.source_dir / _VERSION_SCRIPT
            if version_script.is_file():
                # Hides what -fvisibility cannot: symbols torch's headers force to default.
                link.append(f"-Wl,--version-script={version_script}")
        return [
            self.cxx,
            *flags,
            f"-std={self.std}",
            *(f"-D{d}" for d in self._defines()),
            *(f"-I{p}" for p in includes),
            *(str(s) for s in self.sources),
            "-o",
            str(output),
            *link,
            f"-L{torch.lib_dir}",
            *(f"-l{lib}" for lib in self._libraries()),
        ]

    def _msvc_command(self, output: Path | str, scratch: Path | str) -> list[str]:
        """cl.exe's argv: compile and link in one call; every by-product goes to ``scratch``."""
        torch = self.torch
        includes = [self.dlpack_include, *torch.include_dirs, self.python_include]
        includes += self.gpu_includes
        python_lib = self.python_import_lib
        if python_lib is None:
            raise BuildError("a Windows build plan needs python_import_lib; use plan_build()")
        # cl reads a trailing separator in /Fo as "a directory, one object per source".
        scratch_dir = f"{scratch}\\"
        implib = f"{scratch_dir}{Path(self.filename).stem}.lib"
        return [
            self.cxx,
            "/nologo",
            "/O2",
            "/LD",
            # The DLL runtime, as torch itself is built: objects crossing the boundary
            # (std::string, exceptions) must share one CRT heap.
            "/MD",
            "/EHsc",
            "/permissive-",
            f"/std:{self.std}",
            # Without it cl reports __cplusplus as 199711L and torch's headers misdetect C++17.
            "/Zc:__cplusplus",
            *(f"/D{d}" for d in self._defines()),
            *(f"/I{p}" for p in includes),
            *(str(s) for s in self.sources),
            f"/Fo{scratch_dir}",
            f"/Fe{output}",
            "/link",
            f"/LIBPATH:{torch.lib_dir}",
            *(link_library_name(lib, self.platform) for lib in self._libraries()),
            # Unlike ELF and Mach-O, a DLL must resolve every import at link time,
            # libpython's included.
            f"/LIBPATH:{python_lib.parent}",
            python_lib.name,
            # Keep the import library and .exp out of output_dir.
            f"/IMPLIB:{implib}",
        ]

    def cache_key(self) -> str:
        """sha256 over everything that decides the bytes of the library."""
        digest = hashlib.sha256()
        record = {
            "schema": _CACHE_SCHEMA,
            "sources": _source_digests(self.source_dir),
            "torch": self.torch.identity,
            "backend": self.backend.value,
            "compiler": [self.cxx, self.compiler_banner],
            "command": self.command("{output}"),
            "dlpack": [self.dlpack_version, sha256_of(self.dlpack_include / "dlpack" / "dlpack.h")],
        }
        digest.update(json.dumps(record, sort_keys=True, default=str).encode("utf-8"))
        return digest.hexdigest()


def _source_digests(source_dir: Path) -> dict[str, str]:
    return {
        path.relative_to(source_dir).as_posix(): sha256_of(path)
        for path in sorted(source_dir.rglob("*"))
        if path.is_file() and path.suffix in _SOURCE_SUFFIXES
    }


def find_sources(source_dir: Path | None = None) -> tuple[Path, tuple[Path, ...]]:
    """The C++ sources to compile: ``(directory, its *.cc files)``.

    Default: ``csrc/`` shipped inside the installed package (wheels and sdists put
    it there), else the repository's ``csrc/``. Raises :class:`BuildError` when
    the directory holds no ``.cc`` file.
    """
    if source_dir is None:
        here = Path(__file__).resolve().parent
        candidates = [here / "csrc", here.parent.parent / "csrc"]
        source_dir = next((c for c in candidates if any(c.glob("*.cc"))), candidates[-1])
    sources = tuple(sorted(source_dir.glob("*.cc")))
    if not sources:
        raise BuildError(
            f"no C++ sources (*.cc) in {source_dir}; pass source_dir=<the project's csrc/> "
            "or reinstall torch-c-dlpack-ext (its wheel ships them in torch_c_dlpack_ext/csrc/)"
        )
    return source_dir.resolve(), sources


def _read_define(header: Path, name: str) -> int | None:
    match = re.search(
        rf"^\s*#\s*define\s+{name}\s+(\d+)",
        header.read_text(encoding="utf-8", errors="replace"),
        re.M,
    )
    return int(match.group(1)) if match else None


def find_dlpack_include(dlpack_include: Path | None = None) -> tuple[Path, str]:
    """A directory holding ``dlpack/dlpack.h`` >= 1.2, and that header's version.

    ``dlpack_include`` if given, else apache-tvm-ffi's copy. Raises
    :class:`DLPackHeaderNotFoundError` when none is found or it is too old.
    """
    if dlpack_include is None:
        # Located, not imported: tvm_ffi's __init__ imports torch, and a build must
        # never import the torch it compiles against (it may not even be importable).
        import importlib.util

        spec = importlib.util.find_spec("tvm_ffi")
        if spec is None or not spec.submodule_search_locations:
            raise DLPackHeaderNotFoundError(
                f"no DLPack >= {_MIN_DLPACK[0]}.{_MIN_DLPACK[1]} header: apache-tvm-ffi is "
                f"not installed in {sys.prefix}; {_WANT_DLPACK}"
            )
        dlpack_include = Path(next(iter(spec.submodule_search_locations))) / "include"
    header = Path(dlpack_include) / "dlpack" / "dlpack.h"
    if not header.is_file():
        raise DLPackHeaderNotFoundError(f"{header} does not exist; {_WANT_DLPACK}")
    major = _read_define(header, "DLPACK_MAJOR_VERSION")
    minor = _read_define(header, "DLPACK_MINOR_VERSION")
    if major is None or minor is None or (major, minor) < _MIN_DLPACK:
        found = "no DLPACK_MAJOR/MINOR_VERSION" if major is None else f"DLPack {major}.{minor}"
        raise DLPackHeaderNotFoundError(
            f"{header} has {found}; DLPackExchangeAPI needs DLPack >= "
            f"{_MIN_DLPACK[0]}.{_MIN_DLPACK[1]}; {_WANT_DLPACK}"
        )
    return Path(dlpack_include).resolve(), f"{major}.{minor}"


def _thpvariable_head(header: Path) -> str | None:
    """``struct THPVariable``'s members up to ``cdata;``, comments and blanks removed."""
    text = header.read_text(encoding="utf-8", errors="replace")
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    match = re.search(r"\bstruct\s+THPVariable\s*\{(.*?\bcdata\s*;)", text, re.S)
    if match is None:
        return None
    # 2.4.1 spells it ``PyObject_HEAD;`` (an empty declaration), later releases without.
    return " ".join(match.group(1).split()).replace("PyObject_HEAD;", "PyObject_HEAD")


def check_tensor_layout(torch: TorchInstall) -> str:
    """The head of ``THPVariable`` in ``torch``'s headers, if csrc/tcde_python.h declares it.

    Raises :class:`TorchInstallError` naming the checked releases when the torch minor
    is outside the checked range, or when its ``python_variable.h`` declares another head
    than the one checked for that minor (a dev or vendor build that changed it).
    """
    checked = ", ".join(f"{lo[0]}.{lo[1]}-{hi[0]}.{hi[1]}" for lo, hi, _ in _THPVARIABLE_HEADS)
    minor = (torch.major, torch.minor)
    expected = next((head for lo, hi, head in _THPVARIABLE_HEADS if lo <= minor <= hi), None)
    fix = (
        f"the THPVariable layout csrc/{_LAYOUT_HEADER} declares was checked for torch "
        f"{checked} (PyPI's releases); use one of those, or read {_TORCH_VARIABLE_HEADER} "
        f"of this torch and extend csrc/{_LAYOUT_HEADER} and _THPVARIABLE_HEADS in "
        "_torch_c_dlpack_ext_core/driver.py"
    )
    if expected is None:
        raise TorchInstallError(f"torch {torch.version} at {torch.root} is not supported: {fix}")
    header = torch.root / "include" / _TORCH_VARIABLE_HEADER
    found = _thpvariable_head(header) if header.is_file() else None
    if found != expected:
        what = f"declares {found!r}" if found else "has no struct THPVariable"
        if not header.is_file():
            what = "is missing"
        raise TorchInstallError(
            f"torch {torch.version} at {torch.root}: {header} {what}, but torch "
            f"{torch.major}.{torch.minor} was checked with {expected!r}; {fix}"
        )
    return expected


def _locate_compiler(
    cxx: str | os.PathLike[str] | None,
    environ: Mapping[str, str],
    *,
    defaults: tuple[str, ...],
    bad_request: str,
    none_found: str,
) -> tuple[str, str]:
    """``(path, origin)`` of the compiler: ``cxx``, else ``$CXX``, else the first of
    ``defaults`` on PATH. Raises :class:`CompilerNotFoundError` with ``bad_request``
    (what to pass instead) or ``none_found`` (how to get one)."""
    path_var = environ.get("PATH", "")
    if cxx is not None:
        requested, origin = os.fspath(cxx), "the cxx argument"
    elif environ.get("CXX"):
        requested, origin = environ["CXX"], "$CXX"
    else:
        for name in defaults:
            found = shutil.which(name, path=path_var)
            if found is not None:
                return found, "PATH"
        raise CompilerNotFoundError(none_found)
    found = shutil.which(requested, path=path_var)
    if found is None:
        raise CompilerNotFoundError(
            f"C++ compiler {requested!r} (from {origin}) does not exist or is not "
            f"executable; {bad_request}"
        )
    return found, origin


def find_compiler(
    cxx: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    platform: str | None = None,
) -> tuple[str, str, str]:
    """``(compiler, banner, toolchain)``: ``cxx``, else ``$CXX``, else ``c++``/``g++`` on PATH.

    ``banner`` is the first line of ``--version``; ``toolchain`` the short identity
    (``g++ 12.2.0``). On Windows (``platform``, default ``sys.platform``) the
    compiler is MSVC's ``cl.exe`` instead (see :func:`_find_msvc`). Raises
    :class:`CompilerNotFoundError`.
    """
    environ = os.environ if environ is None else environ
    platform = sys.platform if platform is None else platform
    if platform.startswith("win"):
        return _find_msvc(cxx, environ)
    found, _ = _locate_compiler(
        cxx,
        environ,
        defaults=("c++", "g++"),
        bad_request="pass the path of g++/clang++ or install one (apt install g++)",
        none_found=(
            "no C++ compiler: $CXX is unset and neither c++ nor g++ is on PATH; "
            "install g++ (apt install g++) or set CXX=/path/to/compiler"
        ),
    )
    try:
        proc = run([found, "--version"], echo=False)
    except CommandError as exc:
        raise CompilerNotFoundError(
            f"{found} --version failed ({exc.returncode}); is it a C++ compiler? "
            "set CXX to g++ or clang++"
        ) from None
    banner = (proc.stdout.splitlines() or [""])[0].strip()
    return found, banner, _toolchain_identity(banner, proc.stdout)


def _find_msvc(
    cxx: str | os.PathLike[str] | None, environ: Mapping[str, str]
) -> tuple[str, str, str]:
    """MSVC's ``cl``: ``cxx``, else ``$CXX``, else ``cl.exe`` on PATH (a VS dev environment)."""
    found, origin = _locate_compiler(
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
        proc = run([found], echo=False)
        text = proc.stderr + proc.stdout
    except CommandError as exc:
        text = exc.stderr + exc.stdout
    match = _MSVC_BANNER_RE.search(text)
    if match is None:
        raise CompilerNotFoundError(
            f"{found} printed no MSVC banner ('Microsoft (R) C/C++ Optimizing Compiler "
            f"Version ...'); is it MSVC's cl.exe? {_WANT_MSVC}"
        )
    return found, match.group(0).strip(), f"msvc {match.group(1)}"


def _python_import_library(platform: str, python_lib: Path | None) -> Path | None:
    """The import library a Windows DLL using the C API links; ``None`` elsewhere.

    Default: ``<installed_base>/libs/python3XY.lib`` of the running Python (a
    venv's ``sys.prefix`` has no ``libs``; the base installation does).
    """
    if not platform.startswith("win"):
        return None
    if python_lib is None:
        base = sysconfig.get_config_var("installed_base") or sys.base_prefix
        free_threaded = "t" if sysconfig.get_config_var("Py_GIL_DISABLED") else ""
        name = f"python{sysconfig.get_config_var('py_version_nodot')}{free_threaded}.lib"
        python_lib = Path(base) / "libs" / name
    if not python_lib.is_file():
        raise BuildError(
            f"no Python import library {python_lib}; a Windows extension must link it. "
            "Use a python.org / nuget CPython (they ship libs/python3XY.lib) or pass "
            "python_lib=<path of python3XY.lib>"
        )
    return python_lib.resolve()


def exported_symbols(source_dir: Path) -> tuple[str, ...]:
    """The names ``exports.map`` lists under ``global:`` (the library's whole interface)."""
    text = (source_dir / _VERSION_SCRIPT).read_text(encoding="utf-8")
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    match = re.search(r"global:(.*?)local:", text, re.S)
    names = re.findall(r"([A-Za-z_]\w*)\s*;", match.group(1)) if match else []
    if not names:
        raise BuildError(
            f"{source_dir / _VERSION_SCRIPT} names no symbol under 'global:'; "
            "list the exported functions there (see CONTRIBUTING.md, Build contract)"
        )
    return tuple(names)


def _toolchain_identity(banner: str, full: str) -> str:
    versions = re.findall(r"\d+\.\d+(?:\.\d+)?", banner)
    version = versions[-1] if versions else "unknown"
    if "clang" in banner:
        return f"clang {version}"
    if "Free Software Foundation" in full:
        return f"g++ {version}"
    return f"{banner.split(maxsplit=1)[0] if banner else 'unknown'} {version}"


def _cuda_version(include: Path) -> str | None:
    for header, name in (("cuda_runtime_api.h", "CUDART_VERSION"), ("cuda.h", "CUDA_VERSION")):
        if (include / header).is_file():
            value = _read_define(include / header, name)
            if value is not None:
                return f"{value // 1000}.{value % 1000 // 10}"
    return None


def _rocm_version(home: Path) -> str | None:
    info = home / ".info" / "version"
    if info.is_file():
        return info.read_text(encoding="utf-8").strip().split("-")[0] or None
    header = home / "include" / "hip" / "hip_version.h"
    if header.is_file():
        major = _read_define(header, "HIP_VERSION_MAJOR")
        minor = _read_define(header, "HIP_VERSION_MINOR")
        if major is not None and minor is not None:
            return f"{major}.{minor}"
    return None


def _site_packages_dirs(torch: TorchInstall) -> list[Path]:
    current = [Path(sysconfig.get_paths()["purelib"]), Path(sysconfig.get_paths()["platlib"])]
    return list(dict.fromkeys([torch.site_packages, *current]))


def _cuda_homes(
    torch: TorchInstall, gpu_home: Path | None, environ: Mapping[str, str]
) -> list[tuple[str, Path]]:
    """CUDA toolkit roots to try, in order, each with where it came from."""
    if gpu_home is not None:
        return [("gpu_home", gpu_home)]
    homes = [(f"${v}", Path(environ[v])) for v in ("CUDA_HOME", "CUDA_PATH") if environ.get(v)]
    nvcc = shutil.which("nvcc", path=environ.get("PATH", ""))
    if nvcc is not None:
        homes.append(("nvcc on PATH", Path(nvcc).resolve().parent.parent))
    # NVIDIA's CUDA 12 wheels install per component (nvidia/cuda_runtime, nvidia/cuda_nvcc);
    # the CUDA 13 ones (nvidia-cuda-runtime, nvidia-cuda-crt 13.x) share one toolkit-like
    # tree, nvidia/cu13/include. The tree of torch's own CUDA major is tried first.
    wanted = f"cu{torch.cuda_version.split('.')[0]}" if torch.cuda_version else None
    for site in _site_packages_dirs(torch):
        trees = sorted((site / "nvidia").glob("cu[0-9]*"), key=lambda p: p.name != wanted)
        homes += [("nvidia-cuda-runtime wheel", tree) for tree in trees]
        homes.append(("nvidia-cuda-runtime wheel", site / "nvidia" / "cuda_runtime"))
    return homes


def _rocm_homes(gpu_home: Path | None, environ: Mapping[str, str]) -> list[tuple[str, Path]]:
    """ROCm roots to try, in order, each with where it came from."""
    if gpu_home is not None:
        return [("gpu_home", gpu_home)]
    homes = [(f"${v}", Path(environ[v])) for v in ("ROCM_PATH", "ROCM_HOME") if environ.get(v)]
    return [*homes, ("standard location", Path("/opt/rocm"))]


def _cuda_includes(home: Path) -> tuple[Path, ...] | None:
    """Include dirs of the CUDA headers under ``home``, or ``None`` if they are incomplete.

    A toolkit has everything in ``include/``. NVIDIA's wheels split it: the
    runtime headers (``nvidia/cuda_runtime``) include ``crt/host_defines.h``,
    which only ``nvidia-cuda-nvcc-cu12`` (``nvidia/cuda_nvcc``) ships.
    """
    include = home / "include"
    if not (include / _CUDA_MARKER).is_file():
        return None
    if (include / _CUDA_CRT).is_file():
        return (include.resolve(),)
    nvcc_include = home.parent / "cuda_nvcc" / "include"
    if (nvcc_include / _CUDA_CRT).is_file():
        return include.resolve(), nvcc_include.resolve()
    return None


def cuda_header_wheels(cuda_version: str | None) -> str:
    """The PyPI requirements that supply the CUDA headers (``cuda_runtime_api.h`` and
    ``crt/host_defines.h``) for a torch built with CUDA ``cuda_version`` (``"12.8"``).

    CUDA 12: ``nvidia-cuda-runtime-cu12`` + ``nvidia-cuda-nvcc-cu12`` (the only one with
    ``crt/``); CUDA 13 renamed them: ``nvidia-cuda-runtime`` + ``nvidia-cuda-crt`` (checked
    on PyPI's 13.0.96 / 13.0.88 wheels, which install into ``nvidia/cu13/include``).
    """
    pin = f"=={cuda_version}.*" if cuda_version else ""
    major = cuda_version.split(".")[0] if cuda_version else "12"
    if major.isdigit() and int(major) >= 13:
        return f"nvidia-cuda-runtime{pin} nvidia-cuda-crt{pin}"
    return f"nvidia-cuda-runtime-cu12{pin} nvidia-cuda-nvcc-cu12{pin}"


def find_gpu_toolkit(
    backend: Backend,
    torch: TorchInstall,
    gpu_home: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[tuple[Path, ...], str | None]:
    """``(include dirs, toolkit version)`` of the CUDA / ROCm headers; ``((), None)`` for CPU.

    CUDA: ``gpu_home``, else ``$CUDA_HOME`` / ``$CUDA_PATH``, else the toolkit of
    ``nvcc`` on PATH, else NVIDIA's header wheels in the target environment or
    this one (:func:`cuda_header_wheels`: CUDA 12's ``nvidia/cuda_runtime`` plus
    ``nvidia/cuda_nvcc`` for ``crt/``; CUDA 13's ``nvidia/cu13``). ROCm:
    ``gpu_home``, ``$ROCM_PATH``, ``$ROCM_HOME``, ``/opt/rocm``. An explicit
    ``gpu_home`` is used or rejected, never skipped. Raises
    :class:`GPUHeadersNotFoundError` listing what was tried.
    """
    if backend is Backend.CPU:
        return (), None
    environ = os.environ if environ is None else environ
    if backend is Backend.CUDA:
        homes = _cuda_homes(torch, gpu_home, environ)
        for _origin, home in homes:
            includes = _cuda_includes(home)
            if includes is not None:
                version = _cuda_version(includes[0])
                _warn_cuda_mismatch(torch, version)
                return includes, version
        marker = f"{_CUDA_MARKER} and {_CUDA_CRT}"
        fix = (
            "pass gpu_home=<CUDA toolkit root>, set CUDA_HOME, put nvcc on PATH, or install "
            f"the CUDA headers ('pip install {cuda_header_wheels(torch.cuda_version)}') "
            f"into {torch.site_packages}"
        )
    else:
        homes = _rocm_homes(gpu_home, environ)
        for _origin, home in homes:
            if (home / "include" / _HIP_MARKER).is_file():
                return ((home / "include").resolve(),), _rocm_version(home)
        marker = _HIP_MARKER
        fix = "pass gpu_home=<ROCm root> or set ROCM_PATH to the ROCm installation"
    tried = "; ".join(f"{origin}: {home / 'include'}" for origin, home in homes)
    raise GPUHeadersNotFoundError(
        f"no complete {backend.value.upper()} headers ({marker}) for the {backend.value} "
        f"build; tried {tried or 'nothing'}. Fix: {fix}"
    )


def _warn_cuda_mismatch(torch: TorchInstall, toolkit: str | None) -> None:
    if torch.cuda_version and toolkit and torch.cuda_version.split(".")[0] != toolkit.split(".")[0]:
        print(
            f"warning: CUDA {toolkit} headers for torch {torch.version} (built with CUDA "
            f"{torch.cuda_version}); pass gpu_home of a CUDA {torch.cuda_version.split('.')[0]}.x "
            "toolkit if the build fails",
            file=sys.stderr,
        )


def plan_build(
    *,
    torch: TorchInstall | Path | str,
    backend: Backend | str,
    output_dir: Path | str,
    cxx11_abi: bool | None = None,
    cxx: str | os.PathLike[str] | None = None,
    gpu_home: Path | str | None = None,
    dlpack_include: Path | str | None = None,
    python_include: Path | str | None = None,
    source_dir: Path | str | None = None,
    environ: Mapping[str, str] | None = None,
    platform: str | None = None,
    python_lib: Path | str | None = None,
) -> BuildPlan:
    """Resolve and validate every input of a build without touching ``output_dir``.

    Arguments as for :func:`compile_library`. ``platform`` (default
    ``sys.platform``) selects the toolchain and layout: ``win32`` (MSVC),
    ``darwin`` (clang), else Linux. ``python_lib``: Windows only, the Python
    import library to link (default: the running Python's). Raises the typed
    error of the first problem found.
    """
    platform = sys.platform if platform is None else platform
    backend = parse_backend(backend)
    install = (
        torch
        if isinstance(torch, TorchInstall)
        else TorchInstall.from_path(torch, platform=platform)
    )
    if backend not in install.backends_available:
        marker = link_library_name("c10_cuda" if backend is Backend.CUDA else "c10_hip", platform)
        raise BackendUnavailableError(
            f"torch {install.version} at {install.root} has no {backend.value} support "
            f"({marker} is not in {install.lib_dir}); build the cpu backend for it, or point "
            f"torch at an installation of a {backend.value} build of torch"
        )
    if cxx11_abi is not None and install.cxx11_abi is None:
        raise ABIMismatchError(
            f"cxx11_abi={int(cxx11_abi)} was requested but the C++ dual ABI does not apply on "
            f"{platform}; leave cxx11_abi unset"
        )
    if cxx11_abi is not None and cxx11_abi != install.cxx11_abi:
        raise ABIMismatchError(
            f"cxx11_abi={int(cxx11_abi)} was requested but torch {install.version} at "
            f"{install.root} uses _GLIBCXX_USE_CXX11_ABI={int(bool(install.cxx11_abi))}; a library "
            "built with another ABI fails to load. Leave cxx11_abi unset (it is read from the "
            "installation) or point torch at an installation built with the ABI you want"
        )
    std = "c++20" if (install.major, install.minor) >= _CXX20_FROM else "c++17"
    src_dir, sources = find_sources(Path(source_dir) if source_dir is not None else None)
    if (src_dir / _LAYOUT_HEADER).is_file():
        check_tensor_layout(install)
    dlpack_dir, dlpack_version = find_dlpack_include(
        Path(dlpack_include) if dlpack_include is not None else None
    )
    if not platform.startswith("linux"):
        # Linux keeps linking with -l and lets the linker report a missing library (the
        # fake trees of the tests hold only some); elsewhere say which file is missing.
        missing = install.missing_link_libraries(_torch_libraries(backend), platform)
        if missing:
            raise TorchInstallError(
                f"torch {install.version} at {install.root} lacks {', '.join(missing)} in "
                f"{install.lib_dir}, which the link needs; reinstall torch from an official "
                "wheel (pip install --force-reinstall torch==<version>)"
            )
    compiler, banner, toolchain = find_compiler(cxx, environ, platform=platform)
    gpu_includes, gpu_toolkit = find_gpu_toolkit(
        backend, install, Path(gpu_home) if gpu_home is not None else None, environ
    )
    py_include = Path(python_include or sysconfig.get_paths()["include"])
    if not (py_include / "Python.h").is_file():
        raise BuildError(
            f"no Python.h in {py_include}; install the Python development headers "
            "(e.g. apt install python3-dev) or pass python_include=<dir holding Python.h>"
        )
    python_import_lib = _python_import_library(
        platform, Path(python_lib) if python_lib is not None else None
    )
    return BuildPlan(
        torch=install,
        backend=backend,
        cxx11_abi=install.cxx11_abi,
        cxx=compiler,
        compiler_banner=banner,
        toolchain=toolchain,
        std=std,
        dlpack_include=dlpack_dir,
        dlpack_version=dlpack_version,
        python_include=py_include.resolve(),
        gpu_includes=gpu_includes,
        gpu_toolkit=gpu_toolkit,
        sources=sources,
        source_dir=src_dir,
        output_dir=Path(output_dir).resolve(),
        platform=platform,
        python_import_lib=python_import_lib,
    )


def _cached_entry(plan: BuildPlan, key: str) -> ManifestEntry | None:
    try:
        record = json.loads(plan.sidecar.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("key") != key:
        return None
    try:
        entry = ManifestEntry.from_json(record.get("entry"))
        verify_file(entry, plan.output_dir)
    except ManifestError:
        return None
    return entry if entry.file == plan.filename else None


def _build(plan: BuildPlan, key: str, *, audit: bool) -> ManifestEntry:
    fd, tmp_name = tempfile.mkstemp(prefix=f".{plan.filename}.", suffix=".tmp", dir=plan.output_dir)
    os.close(fd)
    tmp = Path(tmp_name)
    scratch = tempfile.TemporaryDirectory(prefix="tcde-build-")
    try:
        scratch_dir = Path(scratch.name)
        if plan.platform.startswith("darwin") and (plan.source_dir / _VERSION_SCRIPT).is_file():
            # Mach-O C symbols carry a leading underscore; the export list names them so.
            names = exported_symbols(plan.source_dir)
            (scratch_dir / _DARWIN_EXPORTS).write_text(
                "".join(f"_{name}\n" for name in names), encoding="utf-8"
            )
        command = plan.command(tmp, scratch_dir)
        started = time.monotonic()
        try:
            run(command)
        except CommandError as exc:
            raise BuildError(
                f"compiling {plan.filename} against torch {plan.torch.version} failed "
                f"(exit {exc.returncode}):\n{(exc.stderr or exc.stdout).strip()[-6000:]}",
                command=exc.cmd,
                output=exc.stderr or exc.stdout,
            ) from None
        print(
            f"compiled {plan.filename} in {time.monotonic() - started:.1f} s",
            file=sys.stderr,
            flush=True,
        )
        if audit and plan.platform.startswith("linux"):
            audit_library(tmp, plan.torch, plan.backend, cxx=plan.cxx)
        elif audit:
            # The audit checks ELF symbol versions and the libstdc++ dual ABI, neither of
            # which exists on Windows or macOS: there the link itself resolved every import
            # (MSVC) or the wheel job's load test is the check (dyld, -undefined).
            print(
                f"ABI audit of {plan.filename}: {AuditOutcome.NOT_APPLICABLE.value} on "
                f"{plan.platform}",
                file=sys.stderr,
                flush=True,
            )
        entry = ManifestEntry(
            file=plan.filename,
            torch=f"{plan.torch.major}.{plan.torch.minor}",
            torch_build=plan.torch.version,
            backend=plan.backend,
            cxx11_abi=plan.cxx11_abi,
            dlpack=plan.dlpack_version,
            toolchain=plan.toolchain,
            gpu_toolkit=plan.gpu_toolkit,
            platform=host_platform_tag(),
            size=tmp.stat().st_size,
            sha256=sha256_of(tmp),
        )
        tmp.chmod(0o755)
        os.replace(tmp, plan.output)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        scratch.cleanup()
    record = {"key": key, "entry": entry.to_json(), "command": plan.command(plan.output)}
    atomic_write_bytes(plan.sidecar, (json.dumps(record, indent=2, sort_keys=True) + "\n").encode())
    return entry


def compile_library(
    *,
    torch: TorchInstall | Path | str,
    backend: Backend | str,
    output_dir: Path | str,
    cxx11_abi: bool | None = None,
    cxx: str | os.PathLike[str] | None = None,
    gpu_home: Path | str | None = None,
    dlpack_include: Path | str | None = None,
    python_include: Path | str | None = None,
    source_dir: Path | str | None = None,
    audit: bool = True,
) -> ManifestEntry:
    """Compile the exchange library for one target and return its manifest entry.

    ``torch``: a :class:`TorchInstall` or a path :meth:`TorchInstall.from_path`
    accepts. ``cxx11_abi``: checked against the installation (``None``: use
    the installation's). ``cxx``, ``gpu_home``, ``dlpack_include``,
    ``python_include``, ``source_dir``: overrides of what is found
    automatically (see :func:`find_compiler`, :func:`find_gpu_toolkit`,
    :func:`find_dlpack_include`, :func:`find_sources`). ``audit``: run the ABI
    audit before publishing (on Linux).

    The library lands in ``output_dir`` under :func:`~._naming.library_filename`;
    the entry's ``file`` is that bare name. An unchanged target is a cache hit
    and compiles nothing. Raises a :class:`~.errors.TorchCDLPackExtError`
    subclass; on failure no library is left at the output path.
    """
    from filelock import FileLock, Timeout

    plan = plan_build(
        torch=torch,
        backend=backend,
        output_dir=output_dir,
        cxx11_abi=cxx11_abi,
        cxx=cxx,
        gpu_home=gpu_home,
        dlpack_include=dlpack_include,
        python_include=python_include,
        source_dir=source_dir,
    )
    key = plan.cache_key()
    plan.output_dir.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(plan.output) + ".lock", timeout=_LOCK_TIMEOUT_S)
    try:
        with lock:
            cached = _cached_entry(plan, key)
            if cached is not None:
                print(f"{plan.filename} is up to date (cache hit)", file=sys.stderr, flush=True)
                return cached
            return _build(plan, key, audit=audit)
    except Timeout:
        raise BuildError(
            f"another build of {plan.output} held {lock.lock_file} for over "
            f"{_LOCK_TIMEOUT_S:.0f} s; if no build is running, delete that lock file"
        ) from None


def _parse_abi(value: str) -> bool:
    if value not in ("0", "1"):
        raise argparse.ArgumentTypeError("expected 0 or 1")
    return value == "1"


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: build one library and print its manifest entry as JSON."""
    parser = argparse.ArgumentParser(
        prog="python -m _torch_c_dlpack_ext_core.driver",
        description="Compile the DLPack exchange library against a torch installation.",
    )
    parser.add_argument("--torch", required=True, help="torch package dir, site-packages or venv")
    parser.add_argument("--backend", required=True, help="cpu, cuda or rocm")
    parser.add_argument("--output-dir", required=True, type=Path)
    parser.add_argument("--cxx11-abi", type=_parse_abi, default=None, help="0 or 1 (checked)")
    parser.add_argument("--cxx", default=None, help="C++ compiler (default: $CXX, c++, g++)")
    parser.add_argument("--gpu-home", type=Path, default=None, help="CUDA / ROCm root")
    parser.add_argument("--dlpack-include", type=Path, default=None)
    parser.add_argument("--source-dir", type=Path, default=None)
    parser.add_argument("--no-audit", dest="audit", action="store_false")
    parser.add_argument("--traceback", action="store_true", help="show tracebacks on errors")
    args = parser.parse_args(argv)
    try:
        entry = compile_library(
            torch=args.torch,
            backend=args.backend,
            output_dir=args.output_dir,
            cxx11_abi=args.cxx11_abi,
            cxx=args.cxx,
            gpu_home=args.gpu_home,
            dlpack_include=args.dlpack_include,
            source_dir=args.source_dir,
            audit=args.audit,
        )
    except TorchCDLPackExtError as exc:
        if args.traceback:
            raise
        first, _, _rest = str(exc).partition("\n")
        print(f"error: {type(exc).__name__}: {first} (--traceback for details)", file=sys.stderr)
        return exc.exit_code
    data: dict[str, Any] = entry.to_json()
    print(json.dumps(data, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
