"""The portable library's compile: torch-free, C11, ``Python.h`` and ``dlpack/dlpack.h``
only (:class:`PortablePlan`, :func:`plan_portable`, :func:`compile_portable_library`:
``csrc/portable/*.c`` with the toolchain's C compiler; audited by the toolchain's
``audit_torch_free`` and abi3audit). The same steps as the native library's
(:mod:`.buildsteps`): plan first, a lock, a cache record, a temporary name, audits,
rename. :mod:`.driver` re-exports its public names.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

from .buildrequest import BuildPolicy, PortableRequest
from .buildsteps import (
    CACHE_SCHEMA,
    CONTRACT_HEADER,
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
from .errors import BuildError, CommandError
from .files import sha256_of
from .headers import (
    check_target_pyconfig,
    find_dlpack_include,
    find_python_include,
    python_target_of_headers,
)
from .manifest import ManifestEntry
from .naming import ABI3, ANY
from .stableabi import audit_stable_abi
from .toolchains import CompileJob, toolchain_for
from .toolchains.sanitizers import Sanitizer, tagged_filename

__all__ = [
    "PortablePlan",
    "compile_portable_library",
    "plan_portable",
]


@dataclasses.dataclass(frozen=True)
class PortablePlan(PlanOutputs):
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
            "schema": CACHE_SCHEMA,
            "table": "portable",
            "sources": source_digests(self.source_dir),
            # The contract header both tables share (csrc/tcde_contract.h), beside portable/.
            "contract": sha256_of(self.source_dir.parent / CONTRACT_HEADER),
            "exports": sha256_of(self.version_script),
            "python": [self.python, python_headers_identity(self.python_include)],
            "compiler": [self.cc, self.compiler_banner],
            "command": without_locations(self.command("{output}"), places),
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
    check_sanitizers(toolchain, request.sanitizers)
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
        python_exports=find_python_exports(py_include, target, request.python_exports),
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
        return locked_build(
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

    return publish_build(
        plan,
        key,
        what=f"compiling the portable table {plan.filename}",
        compiler_hint="is CC a C compiler? Set it to gcc or clang",
        echo=policy.echo,
        stale_after=policy.timeout,
        check=check,
        entry_of=entry_of,
    )
