"""The ONE compiler driver (``nox -s build``, the sdist build, the JIT): the native
library's plan (:class:`BuildPlan`, :func:`compile_library`: ``csrc/`` against a given torch
installation) and the portable table's torch-free C plan (:class:`PortablePlan`,
:func:`compile_portable_library`: the toolchain's C compiler, ``csrc/portable/*.c``, no
torch; audited by the toolchain's ``audit_torch_free`` and abi3audit), the torch checks, the
cache key (what decides the library's bytes, by content; no install path, so every venv of
one torch build shares a build) and the lock; it calls the toolchain for what differs per
platform.

``nox -s build``, the sdist build and the opt-in JIT all call
:func:`compile_library`. It follows the build contract in CONTRIBUTING.md
(include order, defines, flags, links), takes every fact about the target from
the torch installation's files (never from whether torch imports here), and:

* fails early with a typed error naming what is wrong and how to fix it;
* builds under a lock (``<library>.lock``, its holder recorded beside it:
  :mod:`.buildlock`) so concurrent builds of one target do the work once, a waiter
  says whom it waits for, and the next build removes what a killed one left;
* for a caller that loads what it builds (the JIT: ``owners``), builds into, and reuses
  a cached build from, only a directory no third user could have written (:mod:`.trust`);
* compiles to a temporary name, audits the result, then renames it into place,
  so a failed or killed build never leaves a library at the output path;
* records a cache key in ``<library>.build.json``: an unchanged target
  returns the recorded :class:`ManifestEntry` without compiling. The key covers what
  decides the library's bytes (source, header and torch identities, the compiler, the
  flags) and no input's location, so another venv of the same torch build hits the
  same cache entry instead of rebuilding it;
* writes what it publishes (library, ``.build.json``) with the umask's mode, so a
  cache one user built can be reused read-only by another.

What differs per platform (compiler, argv, library names, audit) is the
:class:`~.toolchains.Toolchain` of the plan's platform; the headers are found by
:mod:`.headers`. This module holds the plan, the torch checks and the cache.

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
import shlex
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from .buildlock import (
    SCRATCH_PREFIX,
    clean_stale_scratch,
    clean_stale_temps,
    hold,
)
from .buildrequest import BuildPolicy, BuildRequest, PortableRequest
from .errors import (
    ABIMismatchError,
    BackendUnavailableError,
    BuildError,
    CommandError,
    ConfigError,
    ManifestError,
    TorchCDLPackExtError,
    TorchInstallError,
)
from .files import atomic_write_bytes, read_verified, reserve_temp_file, sha256_of
from .headers import (
    check_target_pyconfig,
    cuda_mismatch_note,
    find_dlpack_include,
    find_gpu_toolkit,
    find_python_include,
    python_target_of_headers,
)
from .manifest import ManifestEntry
from .naming import (
    ABI3,
    ANY,
    LIMITED_API_VERSION,
    NATIVE_BACKENDS,
    PACKAGE,
    SOURCE_SUFFIXES,
    Backend,
    host_platform_tag,
    library_filename,
)
from .run import run
from .stableabi import audit_stable_abi
from .toolchains import TOOLCHAINS, AuditOutcome, CompileJob, Toolchain, toolchain_for
from .toolchains.protocol import SCRATCH_PLACEHOLDER
from .toolchains.sanitizers import Sanitizer, parse_sanitizers, tagged_filename
from .torchinstall import TorchInstall
from .trust import TrustedOwners, check_trusted, read_trusted
from .version import __version__

__all__ = [
    "DEFAULT_POLICY",
    "BuildPlan",
    "BuildPolicy",
    "BuildRequest",
    "PortablePlan",
    "PortableRequest",
    "check_tensor_layout",
    "compile_library",
    "compile_portable_library",
    "find_sources",
    "main",
    "plan_build",
    "plan_portable",
]

#: Bump when the driver changes what it produces, so old cache records stop matching.
#: 2: libraries for a CPython with the GIL are built with the limited API (python "abi3").
#: 3: the key names no input's location (placeholders and content digests instead).
_CACHE_SCHEMA = 3
#: Torch's CMake config asks dependents for C++20 from 2.12 on (``CXX_STANDARD 20`` in
#: TorchConfig.cmake of PyPI's 2.12.0-2.15.0; 17 in 2.10.0 and 2.11.0).
_CXX20_FROM = (2, 12)
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
#: Where the portable library's sources are, in the source dir (``csrc/``).
PORTABLE_DIR = "portable"
#: What a build does unless its caller says otherwise: audit, echo, no owner checks.
DEFAULT_POLICY = BuildPolicy()


def _torch_libraries(backend: Backend, *, torch_python: bool) -> tuple[str, ...]:
    """The torch libraries the exchange library links, by stem (``c10``).

    ``torch_python``: whether the toolchain links libtorch_python (macOS, Windows). The
    gnu toolchain (Linux) does not: the library looks up its three torch_python symbols
    in the copy ``import torch`` loaded (csrc/tcde_python.h), so its NEEDED entries are
    only libc10, libtorch_cpu and the backend's c10 library; libtorch_python's dependency
    closure (libtorch, libtorch_cuda, the NVIDIA libraries) cost ~70 us per load on torch
    2.8 (docs/facts.md). Elsewhere the list is what it was, libtorch and the backend's
    libtorch_cuda/_hip included, though csrc/ no longer uses the latter.
    """
    # The backend's c10 library, then its torch library.
    gpu = {
        Backend.CPU: (),
        Backend.CUDA: ("c10_cuda", "torch_cuda"),
        Backend.ROCM: ("c10_hip", "torch_hip"),
    }[backend]
    if not torch_python:
        return ("c10", "torch_cpu", *gpu[:1])
    return ("c10", "torch_cpu", "torch", "torch_python", *gpu)


class _Outputs:
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


@dataclasses.dataclass(frozen=True)
class BuildPlan(_Outputs):
    """Everything one compile needs, resolved and validated; builds nothing by itself."""

    torch: TorchInstall
    backend: Backend
    cxx11_abi: bool | None
    cxx: str
    #: The compiler's identification line (part of the cache key).
    compiler_banner: str
    #: Short compiler identity recorded in the library and manifest (``g++ 12.2.0``).
    toolchain: str
    std: str
    dlpack_include: Path
    dlpack_version: str
    python_include: Path
    #: What the library serves, as its manifest entry says it
    #: (:func:`.headers.python_target_of_headers`): ``"abi3"`` (compiled with
    #: ``Py_LIMITED_API``) or a free-threaded ``"3.14t"``.
    python: str
    #: CUDA / ROCm include dirs (two for NVIDIA's wheels: cuda_runtime and cuda_nvcc's crt/).
    gpu_includes: tuple[Path, ...]
    gpu_toolkit: str | None
    sources: tuple[Path, ...]
    source_dir: Path
    output_dir: Path
    #: ``sys.platform`` of the target; selects :attr:`platform_toolchain`.
    platform: str
    #: Windows only: the target Python's import library (``<base>/libs/python3.lib`` for
    #: abi3, ``python314t.lib`` for a free-threaded target).
    python_import_lib: Path | None = None
    #: What ``$CXX`` puts after the compiler (``ccache g++``: ``("g++",)``).
    cxx_args: tuple[str, ...] = ()
    #: The file exporting the target Python's C API, for the ELF audit (``None``: the
    #: running interpreter's).
    python_exports: Path | None = None
    #: What a user should know about this build (CUDA headers of another major than
    #: torch's): said when it compiles, never on a cache hit.
    notes: tuple[str, ...] = ()
    #: A sanitizer build's instrumentation (tests only; ``()`` for a library to ship).
    sanitizers: tuple[Sanitizer, ...] = ()

    @property
    def limited_api(self) -> bool:
        """Compiled with ``Py_LIMITED_API`` (the python is ``abi3``)."""
        return self.python == ABI3

    @property
    def filename(self) -> str:
        name = library_filename(
            self.torch.major,
            self.torch.minor,
            self.backend,
            self.cxx11_abi,
            platform=self.platform,
        )
        return tagged_filename(name, self.sanitizers)

    def _defines(self) -> tuple[str, ...]:
        torch = self.torch
        defines = [f"TCDE_BACKEND_{self.backend.value.upper()}"]
        if self.backend is Backend.ROCM:
            defines += ["USE_ROCM", "__HIP_PLATFORM_AMD__"]
        if self.cxx11_abi is not None:
            defines.append(f"_GLIBCXX_USE_CXX11_ABI={int(self.cxx11_abi)}")
        if self.limited_api:
            # One library for every CPython >= 3.9 with the GIL (see naming.ABI3).
            defines.append(f"Py_LIMITED_API=0x{LIMITED_API_VERSION:08x}")
        # The quotes are part of the argv element: POSIX exec passes them as they are, and on
        # Windows subprocess escapes them (\") so cl's command-line parser restores them.
        return (
            *defines,
            f'TCDE_TORCH_BUILD="{torch.version}"',
            f'TCDE_TOOLCHAIN="{self.toolchain}"',
            f'TCDE_GPU_TOOLKIT="{self.gpu_toolkit or ""}"',
        )

    def job(self) -> CompileJob:
        """What the toolchain needs to write this build's argv."""
        return CompileJob(
            cxx=self.cxx,
            std=self.std,
            defines=self._defines(),
            includes=(
                self.dlpack_include,
                *self.torch.include_dirs,
                self.python_include,
                *self.gpu_includes,
            ),
            sources=self.sources,
            source_dir=self.source_dir,
            lib_dir=self.torch.lib_dir,
            libraries=_torch_libraries(
                self.backend, torch_python=self.platform_toolchain.links_torch_python
            ),
            filename=self.filename,
            python_import_lib=self.python_import_lib,
            cxx_args=self.cxx_args,
            sanitizers=self.sanitizers,
        )

    def _input_locations(self) -> dict[str, Path]:
        """Where this build's inputs happen to be, by the placeholder the cache key
        writes instead (their content is keyed separately)."""
        places = {
            "<torch>": self.torch.root,
            "<sources>": self.source_dir,
            "<dlpack>": self.dlpack_include,
            "<python-include>": self.python_include,
        }
        places.update({f"<gpu-include-{i}>": path for i, path in enumerate(self.gpu_includes)})
        if self.python_import_lib is not None:
            places["<python-lib>"] = self.python_import_lib
        return places

    def cache_key(self) -> str:
        """sha256 over everything that decides the bytes of the library, and nothing
        about where its inputs are installed.

        Two venvs of one torch build put torch, the shipped ``csrc/`` and the DLPack
        headers at different paths; those paths do not change the library (it embeds
        none: no rpath), so the command is keyed with placeholders for them, and each
        input by its identity instead: the source files' sha256, ``dlpack.h``'s sha256,
        the Python headers' (:func:`_python_headers_identity`), the torch build's
        (:attr:`.TorchInstall.identity`), the compiler's path and banner, the GPU
        toolkit's version (a define in the command).
        """
        digest = hashlib.sha256()
        record = {
            "schema": _CACHE_SCHEMA,
            "sources": _source_digests(self.source_dir, skip=PORTABLE_DIR),
            "torch": self.torch.identity,
            "backend": self.backend.value,
            "python": [self.python, _python_headers_identity(self.python_include)],
            "compiler": [self.cxx, self.compiler_banner],
            "command": _without_locations(self.command("{output}"), self._input_locations()),
            "dlpack": [self.dlpack_version, sha256_of(self.dlpack_include / "dlpack" / "dlpack.h")],
        }
        digest.update(json.dumps(record, sort_keys=True, default=str).encode("utf-8"))
        return digest.hexdigest()


def _without_locations(command: Sequence[str], places: Mapping[str, Path]) -> list[str]:
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


def _python_headers_identity(include: Path) -> dict[str, str]:
    """sha256 of the headers that say which CPython the include dir is for
    (``patchlevel.h``: its version; ``pyconfig.h``: its configuration), where present."""
    return {
        name: sha256_of(include / name)
        for name in ("patchlevel.h", "pyconfig.h")
        if (include / name).is_file()
    }


def _source_digests(source_dir: Path, *, skip: str = "") -> dict[str, str]:
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


def _check_abi(install: TorchInstall, cxx11_abi: bool | None, platform: str) -> None:
    if cxx11_abi is None:
        return
    if install.cxx11_abi is None:
        raise ABIMismatchError(
            f"cxx11_abi={int(cxx11_abi)} was requested but the C++ dual ABI does not apply on "
            f"{platform}; leave cxx11_abi unset"
        )
    if cxx11_abi != install.cxx11_abi:
        raise ABIMismatchError(
            f"cxx11_abi={int(cxx11_abi)} was requested but torch {install.version} at "
            f"{install.root} uses _GLIBCXX_USE_CXX11_ABI={int(bool(install.cxx11_abi))}; a library "
            "built with another ABI fails to load. Leave cxx11_abi unset (it is read from the "
            "installation) or point torch at an installation built with the ABI you want"
        )


def plan_build(request: BuildRequest) -> BuildPlan:
    """Resolve and validate every input of ``request`` without touching its ``output_dir``.

    Its ``platform`` (default ``sys.platform``) selects the toolchain
    (:func:`.toolchains.toolchain_for`): ``linux`` (gnu), ``darwin`` (clang), ``win32``
    (MSVC), or a cross target (``linux_aarch64``: gnu-aarch64). ``python_lib``:
    Windows only, the Python import library to link (default: the running
    Python's ``python3.lib``, or ``python3XYt.lib`` for a free-threaded target).
    Raises the typed error of the first problem found.
    """
    platform = sys.platform if request.platform is None else request.platform
    toolchain = toolchain_for(platform)
    _check_sanitizers(toolchain, request.sanitizers)
    environ = os.environ if request.environ is None else request.environ
    backend, torch, python = request.backend, request.torch, request.python
    if backend not in NATIVE_BACKENDS:
        raise BackendUnavailableError(
            f"no native library exists for the {backend.value} backend; the portable table "
            "serves that torch (compile_portable_library)"
        )
    install = (
        torch
        if isinstance(torch, TorchInstall)
        else TorchInstall.from_path(torch, platform=platform)
    )
    if backend not in install.backends_available:
        marker = toolchain.link_library_name("c10_cuda" if backend is Backend.CUDA else "c10_hip")
        raise BackendUnavailableError(
            f"torch {install.version} at {install.root} has no {backend.value} support "
            f"({marker} is not in {install.lib_dir}); build the cpu backend for it, or point "
            f"torch at an installation of a {backend.value} build of torch"
        )
    _check_abi(install, request.cxx11_abi, platform)
    std = "c++20" if (install.major, install.minor) >= _CXX20_FROM else "c++17"
    src_dir, sources = find_sources(request.source_dir)
    if (src_dir / _LAYOUT_HEADER).is_file():
        check_tensor_layout(install)
    dlpack_dir, dlpack_version = find_dlpack_include(request.dlpack_include)
    missing = toolchain.missing_link_libraries(
        install.lib_dir, _torch_libraries(backend, torch_python=toolchain.links_torch_python)
    )
    if missing:
        raise TorchInstallError(
            f"torch {install.version} at {install.root} lacks {', '.join(missing)} in "
            f"{install.lib_dir}, which the link needs; reinstall torch from an official "
            "wheel (pip install --force-reinstall torch==<version>)"
        )
    compiler = toolchain.find_compiler(request.cxx, environ)
    gpu_includes, gpu_toolkit = find_gpu_toolkit(backend, install, request.gpu_home, environ)
    py_include = find_python_include(request.python_include)
    triplet = getattr(toolchain, "triplet", None)  # a cross build's target
    if isinstance(triplet, str):
        check_target_pyconfig(py_include, triplet)
    target = python_target_of_headers(py_include)
    if python is not None and python != target:
        raise BuildError(
            f"python={python!r} was requested, but the headers in {py_include} make a "
            f"{target!r} library; pass python_include=<the include dir of the CPython "
            f"that {python!r} names>"
        )
    python_import_lib = toolchain.python_import_library(
        request.python_lib, limited_api=target == ABI3
    )
    exports = _python_exports(py_include, target, request.python_exports)
    return BuildPlan(
        torch=install,
        backend=backend,
        cxx11_abi=install.cxx11_abi,
        cxx=compiler.path,
        compiler_banner=compiler.banner,
        toolchain=compiler.identity,
        std=std,
        dlpack_include=dlpack_dir,
        dlpack_version=dlpack_version,
        python_include=py_include,
        python=target,
        gpu_includes=gpu_includes,
        gpu_toolkit=gpu_toolkit,
        sources=sources,
        source_dir=src_dir,
        output_dir=request.output_dir.resolve(),
        platform=platform,
        python_import_lib=python_import_lib,
        cxx_args=compiler.args,
        python_exports=exports,
        notes=tuple(filter(None, [cuda_mismatch_note(install, gpu_toolkit)])),
        sanitizers=request.sanitizers,
    )


def _check_sanitizers(toolchain: Toolchain, sanitizers: tuple[Sanitizer, ...]) -> None:
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


def _python_exports(include: Path, target: str, explicit: Path | None) -> Path | None:
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
_MAX_RECORD_BYTES = 1 << 20


def _cached_entry(
    plan: BuildPlan | PortablePlan, key: str, owners: TrustedOwners | None = None
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
            raw = read_trusted(plan.sidecar, _MAX_RECORD_BYTES, owners)
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


def _publish(
    plan: BuildPlan | PortablePlan,
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


def _build(plan: BuildPlan, key: str, policy: BuildPolicy) -> ManifestEntry:
    toolchain = plan.platform_toolchain
    audit, echo = policy.audit, policy.echo

    def check(tmp: Path) -> None:
        compiler = (plan.cxx, *plan.cxx_args)
        if (
            audit
            and toolchain.audit(
                tmp,
                plan.torch,
                plan.backend,
                cxx=compiler,
                python_exports=plan.python_exports,
                sanitizers=plan.sanitizers,
            )
            is (AuditOutcome.NOT_APPLICABLE)
            and echo
        ):
            # The ELF audit checks symbol versions and the libstdc++ dual ABI, neither of
            # which exists on Windows or macOS: there the link itself resolved every import
            # (MSVC) or the wheel job's load test is the check (dyld, -undefined).
            print(
                f"ABI audit of {plan.filename}: {AuditOutcome.NOT_APPLICABLE.value} on "
                f"{plan.platform}",
                file=sys.stderr,
                flush=True,
            )
        if audit and plan.limited_api:
            audit_stable_abi(tmp, name=plan.filename, required=policy.stable_abi_audit)

    def entry_of(tmp: Path, platform: str) -> ManifestEntry:
        return ManifestEntry(
            file=plan.filename,
            torch=f"{plan.torch.major}.{plan.torch.minor}",
            torch_build=plan.torch.version,
            backend=plan.backend,
            cxx11_abi=plan.cxx11_abi,
            dlpack=plan.dlpack_version,
            toolchain=plan.toolchain,
            gpu_toolkit=plan.gpu_toolkit,
            platform=platform,
            python=plan.python,
            size=tmp.stat().st_size,
            sha256=sha256_of(tmp),
        )

    return _publish(
        plan,
        key,
        what=f"compiling {plan.filename} against torch {plan.torch.version}",
        compiler_hint="is CXX a C++ compiler? Set it to g++ or clang++",
        echo=echo,
        stale_after=policy.timeout,
        check=check,
        entry_of=entry_of,
    )


def _locked_build(
    plan: BuildPlan | PortablePlan,
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
        cached = _cached_entry(plan, key, owners)
        if cached is not None:
            if policy.echo:
                print(f"{plan.filename} is up to date (cache hit)", file=sys.stderr, flush=True)
            return cached
        announce()
        return build()


def compile_library(
    request: BuildRequest,
    policy: BuildPolicy = DEFAULT_POLICY,
    *,
    on_compile: Callable[[BuildPlan], None] | None = None,
) -> ManifestEntry:
    """Compile the exchange library ``request`` names and return its manifest entry.

    ``request``: the target and its inputs (:class:`.buildrequest.BuildRequest`, planned by
    :func:`plan_build`); ``policy``: the audits, the echo, the trusted owners and the lock
    timeout (:class:`.buildrequest.BuildPolicy`).

    The Python headers decide what the library serves (its manifest ``python``): those
    of a CPython with the GIL make an ``abi3`` library (``Py_LIMITED_API``, every
    CPython >= 3.9), a free-threaded CPython's a ``"3.14t"`` one; the request's
    ``python`` is checked against them.

    ``on_compile``: called with the plan just before a compile starts (not on a cache
    hit), under the lock, so a caller can say once that it is building (and its
    ``notes``); with ``policy.echo`` and no ``on_compile`` the notes are printed then.

    The library lands in ``output_dir`` under :func:`~.naming.library_filename`;
    the entry's ``file`` is that bare name. An unchanged target is a cache hit
    and compiles nothing. Raises a :class:`~.errors.TorchCDLPackExtError`
    subclass (a failed tool run is a :class:`BuildError` carrying its command and
    output); on failure no library is left at the output path.
    """
    try:
        plan = plan_build(request)
        key = plan.cache_key()

        def announce() -> None:
            if on_compile is not None:
                on_compile(plan)
            elif policy.echo:
                for note in plan.notes:
                    print(f"note: {note}", file=sys.stderr, flush=True)

        return _locked_build(
            plan, key, policy, announce=announce, build=lambda: _build(plan, key, policy)
        )
    except CommandError as exc:
        # A tool run the steps above do not translate themselves: still a failed build.
        raise BuildError(str(exc), command=exc.cmd, output=exc.stderr or exc.stdout) from None


# The portable library: torch-free, C11, Python.h and dlpack/dlpack.h only.


@dataclasses.dataclass(frozen=True)
class PortablePlan(_Outputs):
    """One compile of the portable library (``csrc/portable/*.c``): the torch-free C
    plan beside :class:`BuildPlan`, built by the same toolchain (its C compiler), with the
    same discipline (plan first, temp name, audit, rename, cache record)."""

    cc: str
    compiler_banner: str
    #: ``gcc 12.2.0``: recorded in the library (``TCDE_TOOLCHAIN``) and the manifest.
    toolchain: str
    dlpack_include: Path
    dlpack_version: str
    python_include: Path
    #: ``abi3``, ``abi3.12`` (the limited API of 3.12: vectorcall) or a free-threaded
    #: ``3.14t`` (:func:`.headers.python_target_of_headers` of the headers).
    python: str
    sources: tuple[Path, ...]
    #: ``csrc/portable``.
    source_dir: Path
    #: ``csrc/exports.map``: the native library's three exports, the same three here.
    version_script: Path
    output_dir: Path
    platform: str
    python_import_lib: Path | None = None
    cc_args: tuple[str, ...] = ()
    python_exports: Path | None = None
    sanitizers: tuple[Sanitizer, ...] = ()

    @property
    def limited_api(self) -> int | None:
        """``Py_LIMITED_API`` of an abi3 build (``None``: the full API)."""
        from .naming import parse_python_target

        if not self.python.startswith(ABI3):
            return None
        major, minor, _ = parse_python_target(self.python)
        return (major << 24) | (minor << 16)

    @property
    def filename(self) -> str:
        from .naming import portable_library_filename

        name = portable_library_filename(self.python, platform=self.platform)
        return tagged_filename(name, self.sanitizers)

    def job(self) -> CompileJob:
        defines = [] if self.limited_api is None else [f"Py_LIMITED_API=0x{self.limited_api:08x}"]
        return CompileJob(
            cxx=self.cc,
            std="c11",
            defines=(*defines, f'TCDE_TOOLCHAIN="{self.toolchain}"'),
            includes=(self.dlpack_include, self.python_include),
            sources=self.sources,
            source_dir=self.source_dir,
            lib_dir=None,
            libraries=(),
            filename=self.filename,
            python_import_lib=self.python_import_lib,
            cxx_args=self.cc_args,
            language="c",
            version_script=self.version_script,
            sanitizers=self.sanitizers,
        )

    def cache_key(self) -> str:
        """sha256 over what decides the library's bytes (sources, headers, compiler,
        command with locations as placeholders), as :meth:`BuildPlan.cache_key`."""
        places = {
            "<sources>": self.source_dir,
            "<exports>": self.version_script,
            "<dlpack>": self.dlpack_include,
            "<python-include>": self.python_include,
        }
        if self.python_import_lib is not None:
            places["<python-lib>"] = self.python_import_lib
        record = {
            "schema": _CACHE_SCHEMA,
            "table": "portable",
            "sources": _source_digests(self.source_dir),
            "exports": sha256_of(self.version_script),
            "python": [self.python, _python_headers_identity(self.python_include)],
            "compiler": [self.cc, self.compiler_banner],
            "command": _without_locations(self.command("{output}"), places),
            "dlpack": [self.dlpack_version, sha256_of(self.dlpack_include / "dlpack" / "dlpack.h")],
        }
        return hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode()).hexdigest()


def plan_portable(request: PortableRequest) -> PortablePlan:
    """Resolve and check everything the portable library's compile needs: no torch.

    ``request.source_dir``: the ``csrc/`` holding ``portable/*.c`` and ``exports.map`` (default:
    :func:`find_sources`' directory). ``python``: ``abi3`` (default for a GIL CPython's
    headers), ``abi3.12`` (the limited API of 3.12, needs those headers) or, checked
    against the headers, a free-threaded ``3.14t``. Raises :class:`BuildError` (a missing
    C compiler is a :class:`~.errors.CompilerNotFoundError`)."""
    platform = sys.platform if request.platform is None else request.platform
    environ = os.environ if request.environ is None else request.environ
    python = request.python
    toolchain = toolchain_for(platform)
    _check_sanitizers(toolchain, request.sanitizers)
    csrc = request.source_dir if request.source_dir is not None else find_sources()[0]
    portable_dir = csrc / PORTABLE_DIR
    sources = tuple(sorted(portable_dir.glob("*.c")))
    if not sources:
        raise BuildError(
            f"no portable table sources (*.c) in {portable_dir}; pass source_dir=<the "
            "project's csrc/> or reinstall torch-c-dlpack-ext"
        )
    version_script = csrc / "exports.map"
    dlpack_dir, dlpack_version = find_dlpack_include(request.dlpack_include)
    compiler = toolchain.find_c_compiler(request.cc, environ)
    py_include = find_python_include(request.python_include)
    triplet = getattr(toolchain, "triplet", None)  # a cross build's target
    if isinstance(triplet, str):
        check_target_pyconfig(py_include, triplet)
    target = python_target_of_headers(py_include)
    if python is not None and python != target:
        from .naming import parse_python_target

        wanted = parse_python_target(python)
        if not (target == ABI3 and wanted[2] == "abi3" and _headers_at_least(py_include, wanted)):
            raise BuildError(
                f"python={python!r} was requested, but the headers in {py_include} make a "
                f"{target!r} library; pass python_include=<the include dir of the CPython "
                f"that {python!r} names>"
            )
        target = python
    python_import_lib = toolchain.python_import_library(
        request.python_lib, limited_api=target.startswith(ABI3)
    )
    return PortablePlan(
        cc=compiler.path,
        compiler_banner=compiler.banner,
        toolchain=compiler.identity,
        dlpack_include=dlpack_dir,
        dlpack_version=dlpack_version,
        python_include=py_include,
        python=target,
        sources=tuple(s.resolve() for s in sources),
        source_dir=portable_dir.resolve(),
        version_script=version_script.resolve(),
        output_dir=request.output_dir.resolve(),
        platform=platform,
        python_import_lib=python_import_lib,
        cc_args=compiler.args,
        python_exports=_python_exports(py_include, target, request.python_exports),
        sanitizers=request.sanitizers,
    )


def _headers_at_least(include: Path, wanted: tuple[int, int, str]) -> bool:
    """The CPython headers in ``include`` are of ``wanted``'s version or later (an abi3.12
    build needs 3.12's)."""
    text = (include / "patchlevel.h").read_text(encoding="utf-8", errors="replace")
    major = re.search(r"#define\s+PY_MAJOR_VERSION\s+(\d+)", text)
    minor = re.search(r"#define\s+PY_MINOR_VERSION\s+(\d+)", text)
    return bool(major and minor) and (int(major.group(1)), int(minor.group(1))) >= wanted[:2]  # type: ignore[union-attr]


def compile_portable_library(
    request: PortableRequest,
    policy: BuildPolicy = DEFAULT_POLICY,
    *,
    on_compile: Callable[[PortablePlan], None] | None = None,
) -> ManifestEntry:
    """Compile the portable library (the torch-agnostic table) ``request`` names and
    return its manifest entry (``torch``, ``torch_build``, ``backend``: ``any``).
    ``policy`` and ``on_compile``: as :func:`compile_library` takes them (the JIT's policy
    names ``owners``). The same steps as the native library's: under the output's lock a
    cache hit compiles nothing; otherwise it compiles to a temporary name, audits (the
    toolchain's torch-free audit: no torch library or symbol; and, for an abi3 library,
    the stable ABI audit), and renames into place."""
    try:
        built = plan_portable(request)
        key = built.cache_key()
        return _locked_build(
            built,
            key,
            policy,
            announce=lambda: None if on_compile is None else on_compile(built),
            build=lambda: _build_portable(built, key, policy),
        )
    except CommandError as exc:
        raise BuildError(str(exc), command=exc.cmd, output=exc.stderr or exc.stdout) from None


def _build_portable(plan: PortablePlan, key: str, policy: BuildPolicy) -> ManifestEntry:
    def check(tmp: Path) -> None:
        if policy.audit:
            plan.platform_toolchain.audit_torch_free(
                tmp,
                cc=(plan.cc, *plan.cc_args),
                python_exports=plan.python_exports,
                sanitizers=plan.sanitizers,
            )
            if plan.limited_api is not None:
                audit_stable_abi(tmp, name=plan.filename, required=policy.stable_abi_audit)

    def entry_of(tmp: Path, platform: str) -> ManifestEntry:
        return ManifestEntry(
            file=plan.filename,
            torch=ANY,
            torch_build=ANY,
            backend=None,
            cxx11_abi=None,
            dlpack=plan.dlpack_version,
            toolchain=plan.toolchain,
            gpu_toolkit=None,
            platform=platform,
            python=plan.python,
            size=tmp.stat().st_size,
            sha256=sha256_of(tmp),
        )

    return _publish(
        plan,
        key,
        what=f"compiling the portable table {plan.filename}",
        compiler_hint="is CC a C compiler? Set it to gcc or clang",
        echo=policy.echo,
        stale_after=policy.timeout,
        check=check,
        entry_of=entry_of,
    )


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
    parser.add_argument(
        "--sanitize",
        default=None,
        metavar="NAMES",
        help="a sanitizer build for tests: address, undefined or address,undefined "
        "(load it with the runtime preloaded: LD_PRELOAD)",
    )
    parser.add_argument("--traceback", action="store_true", help="show tracebacks on errors")
    args = parser.parse_args(argv)
    try:
        request = BuildRequest(
            torch=Path(args.torch),
            backend=args.backend,
            output_dir=args.output_dir,
            cxx11_abi=args.cxx11_abi,
            cxx=args.cxx,
            gpu_home=args.gpu_home,
            dlpack_include=args.dlpack_include,
            source_dir=args.source_dir,
            sanitizers=parse_sanitizers(args.sanitize),
        )
        entry = compile_library(request, BuildPolicy(audit=args.audit))
    except TorchCDLPackExtError as exc:
        if args.traceback:
            raise
        # The first line says what failed; a failed tool's last lines follow, indented.
        first, _, rest = str(exc).strip().partition("\n")
        details = "".join(f"\n  {line}" for line in rest.splitlines())
        print(
            f"error: {type(exc).__name__}: {first} (--traceback for details){details}",
            file=sys.stderr,
        )
        return exc.exit_code
    print(json.dumps(entry.to_json(), indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
