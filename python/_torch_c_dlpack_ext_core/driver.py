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
:mod:`.headers`. This module holds the native library's plan and its command line; the
steps both libraries' builds take (the cache, the lock, publication) are
:mod:`.buildsteps`', the torch checks :mod:`.torchchecks`', and the portable library's
plan :mod:`.portableplan`'s (re-exported here).

Command line::

    python -m _torch_c_dlpack_ext_core.driver --torch PATH --backend cpu --output-dir DIR
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .buildrequest import BuildPolicy, BuildRequest, PortableRequest
from .buildsteps import (
    CACHE_SCHEMA,
    DEFAULT_POLICY,
    PORTABLE_DIR,
    PlanOutputs,
    check_sanitizers,
    find_python_exports,
    find_sources,
    locked_build,
    publish_build,
    python_headers_identity,
    source_digests,
    without_locations,
)
from .errors import (
    BackendUnavailableError,
    BuildError,
    CommandError,
    TorchCDLPackExtError,
    TorchInstallError,
)
from .files import sha256_of
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
    LIMITED_API_VERSION,
    NATIVE_BACKENDS,
    Backend,
    library_filename,
)
from .stableabi import audit_stable_abi
from .toolchains import AuditOutcome, CompileJob, toolchain_for
from .toolchains.sanitizers import Sanitizer, parse_sanitizers, tagged_filename
from .torchchecks import LAYOUT_HEADER, check_abi, check_tensor_layout
from .torchinstall import TorchInstall

if TYPE_CHECKING:
    from .portableplan import PortablePlan, compile_portable_library, plan_portable

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

#: The portable table's names, re-exported from :mod:`.portableplan` on first use (PEP 562),
#: so a native build never imports the portable plan.
_PORTABLE_NAMES = frozenset({"PortablePlan", "compile_portable_library", "plan_portable"})


def __getattr__(name: str) -> object:
    if name in _PORTABLE_NAMES:
        from . import portableplan

        return getattr(portableplan, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: Torch's CMake config asks dependents for C++20 from 2.12 on (``CXX_STANDARD 20`` in
#: TorchConfig.cmake of PyPI's 2.12.0-2.15.0; 17 in 2.10.0 and 2.11.0).
_CXX20_FROM = (2, 12)


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


@dataclasses.dataclass(frozen=True)
class BuildPlan(PlanOutputs):
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
        the Python headers' (:func:`python_headers_identity`), the torch build's
        (:attr:`.TorchInstall.identity`), the compiler's path and banner, the GPU
        toolkit's version (a define in the command).
        """
        digest = hashlib.sha256()
        record = {
            "schema": CACHE_SCHEMA,
            "sources": source_digests(self.source_dir, skip=PORTABLE_DIR),
            "torch": self.torch.identity,
            "backend": self.backend.value,
            "python": [self.python, python_headers_identity(self.python_include)],
            "compiler": [self.cxx, self.compiler_banner],
            "command": without_locations(self.command("{output}"), self._input_locations()),
            "dlpack": [self.dlpack_version, sha256_of(self.dlpack_include / "dlpack" / "dlpack.h")],
        }
        digest.update(json.dumps(record, sort_keys=True, default=str).encode("utf-8"))
        return digest.hexdigest()


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
    check_sanitizers(toolchain, request.sanitizers)
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
    check_abi(install, request.cxx11_abi, platform)
    std = "c++20" if (install.major, install.minor) >= _CXX20_FROM else "c++17"
    src_dir, sources = find_sources(request.source_dir)
    if (src_dir / LAYOUT_HEADER).is_file():
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
    exports = find_python_exports(py_include, target, request.python_exports)
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

    return publish_build(
        plan,
        key,
        what=f"compiling {plan.filename} against torch {plan.torch.version}",
        compiler_hint="is CXX a C++ compiler? Set it to g++ or clang++",
        echo=echo,
        stale_after=policy.timeout,
        check=check,
        entry_of=entry_of,
    )


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

        return locked_build(
            plan, key, policy, announce=announce, build=lambda: _build(plan, key, policy)
        )
    except CommandError as exc:
        # A tool run the steps above do not translate themselves: still a failed build.
        raise BuildError(str(exc), command=exc.cmd, output=exc.stderr or exc.stdout) from None


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
