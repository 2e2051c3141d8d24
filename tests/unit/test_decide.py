"""The selection policy as a table: (torch, manifest, environment) -> decision."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from _torch_c_dlpack_ext_core.errors import ManifestError, PackageInArchiveError
from _torch_c_dlpack_ext_core.installsource import InstallKind, InstallSource
from _torch_c_dlpack_ext_core.manifest import ManifestEntry
from _torch_c_dlpack_ext_core.naming import Backend, library_filename
from _torch_c_dlpack_ext_core.version import __version__
from torch_c_dlpack_ext._decide import Decision, DecisionKind, Settings, decide, manifest_needed
from torch_c_dlpack_ext._settings import read_settings
from torch_c_dlpack_ext._torchinfo import TorchInfo

P = "TORCH_C_DLPACK_EXT_"
K = DecisionKind


def entry(torch: str, backend: str, abi: bool | None, build: str = "") -> ManifestEntry:
    major, minor = (int(x) for x in torch.split("."))
    return ManifestEntry(
        file="libs/" + library_filename(major, minor, backend, abi),
        torch=torch,
        torch_build=build or f"{torch}.0",
        backend=Backend(backend),
        cxx11_abi=abi,
        dlpack="1.3",
        toolchain="g++ 12.2.0",
        gpu_toolkit=None if backend == "cpu" else "12.4",
        platform="linux_x86_64",
        python="3.11",
        size=1,
        sha256="0" * 64,
    )


def torch_info(
    version: str = "2.6.0+cu124",
    backend: Backend = Backend.CUDA,
    abi: bool | None = False,
    **flags: bool,
) -> TorchInfo:
    return TorchInfo(
        version=version,
        backend=backend,
        cxx11_abi=abi,
        cuda_version="12.4" if backend is Backend.CUDA else None,
        hip_version="6.2" if backend is Backend.ROCM else None,
        has_capsule=flags.get("has_capsule", False),
        has_legacy_int=flags.get("has_legacy_int", False),
        has_to_dlpack=flags.get("has_to_dlpack", True),
        # The entries below serve CPython 3.11 with the GIL, whatever runs the tests.
        python=((3, 14), True) if flags.get("freethreaded") else ((3, 11), False),
    )


def portable_entry(python: str = "abi3", file: str = "") -> ManifestEntry:
    """The torch-agnostic portable library of one Python ABI."""
    return ManifestEntry(
        file=file or f"libs/libtorch_c_dlpack_ext-portable-{python}.so",
        torch="any",
        torch_build="any",
        backend=None,
        cxx11_abi=None,
        dlpack="1.3",
        toolchain="gcc 12.2.0",
        gpu_toolkit=None,
        platform="linux_x86_64",
        python=python,
        size=1,
        sha256="0" * 64,
    )


CUDA26 = entry("2.6", "cuda", False, "2.6.0+cu124")
CPU26 = entry("2.6", "cpu", False, "2.6.0+cpu")
CUDA26_ABI1 = entry("2.6", "cuda", True, "2.6.0+cu126")
CUDA28 = entry("2.8", "cuda", True, "2.8.0+cu128")
CPU28 = entry("2.8", "cpu", True, "2.8.0+cpu")
ROCM28 = entry("2.8", "rocm", True, "2.8.0+rocm6.3")
CPU26_NOABI = entry("2.6", "cpu", None)
FULL = (CUDA26, CPU26, CUDA28, CPU28, ROCM28)
BROKEN = ManifestError("manifest /x/manifest.json is not valid JSON")
MISSING = ManifestError("no manifest at /x/manifest.json")
ZIPPED = PackageInArchiveError(
    "this torch-c-dlpack-ext is inside the zip archive /x/site.zip", "install it unzipped"
)


@dataclasses.dataclass
class Case:
    id: str
    info: TorchInfo
    manifest: Sequence[ManifestEntry] | ManifestError
    env: dict[str, str]
    kind: DecisionKind
    entry: ManifestEntry | None = None
    fallbacks: tuple[ManifestEntry, ...] = ()
    #: Substrings that must appear in reason + remedy + warnings.
    says: tuple[str, ...] = ()
    warns: bool = False
    #: Substrings that must not appear there.
    never: tuple[str, ...] = ()


CASES = [
    Case("exact match", torch_info(), FULL, {}, K.LOAD, CUDA26),
    Case(
        "exact match cpu torch",
        torch_info("2.6.0+cpu", Backend.CPU),
        FULL,
        {},
        K.LOAD,
        CPU26,
    ),
    Case(
        "abi mismatch only",
        torch_info(abi=True),
        (CUDA26, CPU26),
        {},
        K.UNAVAILABLE,
        says=(
            "no bundled library matches torch 2.6.0+cu124 (cuda cxx11abi1)",
            "torch 2.6 cuda cxx11abi0; torch 2.6 cpu cxx11abi0",
            # The remedy builds THIS version from source, its build requirements first
            # (unpinned, pip fetched PyPI's 0.1.5 sdist, which fails: issue 21 item 13).
            '"packaging>=24"',
            "pip install --force-reinstall --no-deps --no-build-isolation --no-binary "
            f"torch-c-dlpack-ext torch-c-dlpack-ext=={__version__};",
            f"{P}JIT=1",
        ),
    ),
    Case(
        "same minor other abi present",
        torch_info(abi=True),
        (CUDA26, CUDA26_ABI1),
        {},
        K.LOAD,
        CUDA26_ABI1,
    ),
    Case(
        "gpu torch never falls back to the cpu library",
        torch_info("2.6.0+cu124"),
        (CPU26, CUDA28),
        {},
        K.UNAVAILABLE,
        says=(
            "no bundled cuda library for torch 2.6.0+cu124 (cuda cxx11abi0)",
            "torch 2.6 cpu cxx11abi0, is not used on a cuda torch",
            f"{P}JIT=1 to build the cuda library",
            "pip install --force-reinstall",
            f"{P}BACKEND=cpu uses the CPU library",
        ),
    ),
    Case(
        "backend missing, jit builds it and nothing falls back to cpu",
        torch_info("2.6.0+cu124"),
        (CPU26,),
        {P + "JIT": "1"},
        K.JIT,
    ),
    Case(
        "rocm torch never gets the cuda library",
        torch_info("2.8.0+rocm6.3", Backend.ROCM, True),
        (CUDA28,),
        {},
        K.UNAVAILABLE,
        says=("rocm", "torch 2.8 cuda cxx11abi1"),
    ),
    Case(
        "rocm torch gets rocm",
        torch_info("2.8.0+rocm6.3", Backend.ROCM, True),
        FULL,
        {},
        K.LOAD,
        ROCM28,
    ),
    Case(
        "cuda torch does not get rocm or cpu",
        torch_info("2.8.0+cu128", Backend.CUDA, True),
        (ROCM28, CPU28),
        {},
        K.UNAVAILABLE,
        says=("no bundled cuda library",),
    ),
    Case(
        "version not in manifest",
        torch_info("2.5.1+cu124"),
        FULL,
        {},
        K.UNAVAILABLE,
        says=("torch 2.5.1+cu124", "torch 2.8 rocm cxx11abi1"),
    ),
    Case(
        "local version counts as its minor",
        torch_info("2.8.0a0+abc1234", Backend.CUDA, True),
        FULL,
        {},
        K.LOAD,
        CUDA28,
    ),
    Case(
        "exact torch build preferred among same cell",
        torch_info("2.6.0+cu126", Backend.CUDA, True),
        (entry("2.6", "cuda", True, "2.6.0+cu124"), CUDA26_ABI1),
        {},
        K.LOAD,
        CUDA26_ABI1,
        (entry("2.6", "cuda", True, "2.6.0+cu124"),),
    ),
    Case(
        "none abi matches only none",
        torch_info("2.6.0", Backend.CPU, None),
        (CPU26, CPU26_NOABI),
        {},
        K.LOAD,
        CPU26_NOABI,
    ),
    Case(
        "false abi does not match none",
        torch_info("2.6.0", Backend.CPU, False),
        (CPU26_NOABI,),
        {},
        K.UNAVAILABLE,
    ),
    Case("universal wheel", torch_info(), (), {}, K.UNAVAILABLE, says=("bundles no libraries",)),
    Case(
        "defer on capsule",
        torch_info("2.13.0+cu130", abi=True, has_capsule=True),
        FULL,
        {},
        K.DEFER,
        says=("provides __dlpack_c_exchange_api__ itself",),
    ),
    Case(
        "defer with manifest missing",
        torch_info("2.13.0", abi=True, has_capsule=True),
        ManifestError("no manifest at /x/manifest.json"),
        {},
        K.DEFER,
    ),
    Case(
        "defer with manifest corrupt", torch_info("2.13.0", has_capsule=True), BROKEN, {}, K.DEFER
    ),
    Case(
        "defer on rocm too",
        torch_info("2.10.0+rocm6.4", Backend.ROCM, True, has_capsule=True),
        BROKEN,
        {},
        K.DEFER,
    ),
    Case(
        "capsule wins over legacy int",
        torch_info(has_capsule=True, has_legacy_int=True),
        FULL,
        {},
        K.DEFER,
    ),
    Case("legacy int", torch_info(has_legacy_int=True), BROKEN, {}, K.PUBLISH_LEGACY),
    Case(
        "disable",
        torch_info(),
        FULL,
        {P + "DISABLE": "1"},
        K.DISABLED,
        says=(f"unset {P}DISABLE",),
    ),
    Case("disable off", torch_info(), FULL, {P + "DISABLE": "off"}, K.LOAD, CUDA26),
    Case(
        "force loads despite capsule",
        torch_info("2.6.0+cu124", has_capsule=True),
        FULL,
        {P + "FORCE": "1"},
        K.LOAD,
        CUDA26,
    ),
    Case(
        "force overrides legacy int",
        torch_info(has_legacy_int=True),
        FULL,
        {P + "FORCE": "true"},
        K.LOAD,
        CUDA26,
    ),
    Case(
        "force without a match",
        torch_info("2.13.0", abi=True, has_capsule=True),
        FULL,
        {P + "FORCE": "1"},
        K.UNAVAILABLE,
    ),
    Case(
        "disable beats force",
        torch_info(has_capsule=True),
        FULL,
        {P + "DISABLE": "1", P + "FORCE": "1"},
        K.DISABLED,
    ),
    Case(
        "library override",
        torch_info(),
        BROKEN,
        {P + "LIBRARY": "<lib>"},
        K.LOAD,
        says=("no size/sha256 check was done",),
    ),
    Case(
        "library override ignored when torch has the api",
        torch_info(has_capsule=True),
        FULL,
        {P + "LIBRARY": "<lib>"},
        K.DEFER,
        says=(f"{P}LIBRARY is ignored", f"{P}FORCE=1"),
        warns=True,
    ),
    Case(
        "backend override to cpu silences fallback",
        torch_info("2.6.0+cu124"),
        (CPU26,),
        {P + "BACKEND": "cpu"},
        K.LOAD,
        CPU26,
    ),
    Case(
        "backend override for another GPU conflicts with the torch build",
        torch_info("2.8.0+cu128", Backend.CUDA, True),
        FULL,
        {P + "BACKEND": "rocm", P + "JIT": "1"},
        K.UNAVAILABLE,
        says=(
            f"{P}BACKEND=rocm conflicts with the torch build",
            "is a CUDA build (torch.version.cuda 12.4)",
            f"unset {P}BACKEND to use this torch's cuda library",
            f"{P}BACKEND=cpu",
        ),
    ),
    Case(
        "gpu backend override on a cpu torch conflicts with the torch build",
        torch_info("2.8.0+cpu", Backend.CPU, True),
        FULL,
        {P + "BACKEND": "rocm"},
        K.UNAVAILABLE,
        says=(f"{P}BACKEND=rocm conflicts with the torch build", "is a CPU build"),
    ),
    Case(
        "gpu backend override on an xpu torch conflicts with the torch build",
        torch_info("2.8.0+xpu", Backend.XPU, True),
        FULL,
        {P + "BACKEND": "cuda"},
        K.UNAVAILABLE,
        says=(f"{P}BACKEND=cuda conflicts with the torch build", "is an XPU build"),
    ),
    Case(
        "backend override naming torch's own backend is honoured",
        torch_info("2.8.0+rocm6.3", Backend.ROCM, True),
        FULL,
        {P + "BACKEND": "rocm"},
        K.LOAD,
        ROCM28,
    ),
    Case(
        "bad backend override",
        torch_info(),
        FULL,
        {P + "BACKEND": "cdua"},
        K.UNAVAILABLE,
        says=(f"{P}BACKEND", "expected one of cpu, cuda, rocm", f"fix or unset {P}BACKEND"),
    ),
    Case(
        "bad boolean override",
        torch_info(),
        FULL,
        {P + "DISABLE": "maybe"},
        K.UNAVAILABLE,
        says=(f"fix or unset {P}DISABLE",),
    ),
    Case(
        "unknown variable",
        torch_info(),
        FULL,
        {P + "BAKEND": "cpu"},
        K.UNAVAILABLE,
        says=(f"did you mean {P}BACKEND?",),
    ),
    Case(
        "missing library override file",
        torch_info(),
        FULL,
        {P + "LIBRARY": "/nonexistent/lib.so"},
        K.UNAVAILABLE,
        says=(f"fix or unset {P}LIBRARY", "is not an existing file"),
    ),
    Case(
        "bad override even where torch has the api",
        torch_info(has_capsule=True),
        FULL,
        {P + "FORCE": "2"},
        K.UNAVAILABLE,
        says=("torch's own API, if any, is unaffected",),
    ),
    Case(
        "manifest corrupt",
        torch_info(),
        BROKEN,
        {},
        K.UNAVAILABLE,
        says=(
            "no usable manifest",
            "not valid JSON",
            f"{P}JIT=1",
            f"pip install --force-reinstall --no-deps torch-c-dlpack-ext=={__version__};",
        ),
    ),
    Case("manifest corrupt with jit", torch_info(), BROKEN, {P + "JIT": "1"}, K.JIT),
    # Issue 36 item 6: PORTABLE is honoured with no usable manifest. It used to be read
    # only after the manifest: JIT=1 built and published the NATIVE library instead, and
    # without JIT the warning named only the manifest.
    Case(
        "manifest corrupt with PORTABLE and JIT builds the portable table",
        torch_info(),
        BROKEN,
        {P + "PORTABLE": "1", P + "JIT": "1"},
        K.PORTABLE,
        says=(
            f"{P}PORTABLE asks for the portable table",
            "no usable manifest",
            f"{P}JIT builds it",
        ),
    ),
    Case(
        "manifest missing with PORTABLE and JIT builds the portable table",
        torch_info("2.8.0+cpu", Backend.CPU, True),
        MISSING,
        {P + "PORTABLE": "yes", P + "JIT": "on"},
        K.PORTABLE,
        says=("no manifest at /x/manifest.json",),
    ),
    Case(
        "manifest corrupt with PORTABLE and JIT on a torch with its own table",
        torch_info("2.13.0", Backend.CPU, True, has_capsule=True),
        BROKEN,
        {P + "PORTABLE": "1", P + "JIT": "1"},
        K.PORTABLE,
    ),
    Case(
        "manifest corrupt with PORTABLE: unavailable naming PORTABLE",
        torch_info(),
        BROKEN,
        {P + "PORTABLE": "1"},
        K.UNAVAILABLE,
        says=(
            f"{P}PORTABLE asks for the portable table, but there is no usable manifest",
            "not valid JSON",
            f"pip install --force-reinstall --no-deps torch-c-dlpack-ext=={__version__};",
            f"{P}JIT=1 to build the portable table",
            f"unset {P}PORTABLE",
        ),
        never=("build a library for this torch",),
    ),
    Case(
        "manifest corrupt with PORTABLE and JIT, torch without _to_dlpack",
        torch_info(has_to_dlpack=False),
        BROKEN,
        {P + "PORTABLE": "1", P + "JIT": "1"},
        K.UNAVAILABLE,
        says=("has no torch._C._to_dlpack", f"unset {P}PORTABLE"),
        never=(f"{P}JIT=1", "pip install"),
    ),
    Case(
        "manifest corrupt with PORTABLE=0 and JIT builds the native library",
        torch_info(),
        BROKEN,
        {P + "PORTABLE": "0", P + "JIT": "1"},
        K.JIT,
    ),
    # An empty or blank value counts as unset (VAR= in a script clears an override).
    Case(
        "manifest corrupt with an empty PORTABLE and JIT builds the native library",
        torch_info(),
        BROKEN,
        {P + "PORTABLE": "", P + "JIT": "1"},
        K.JIT,
    ),
    Case(
        "manifest corrupt with a blank PORTABLE is unavailable naming the manifest only",
        torch_info(),
        BROKEN,
        {P + "PORTABLE": " \t"},
        K.UNAVAILABLE,
        says=("no usable manifest",),
        never=("PORTABLE",),
    ),
    Case(
        "manifest corrupt with PORTABLE=maybe is a bad setting",
        torch_info(),
        BROKEN,
        {P + "PORTABLE": "maybe", P + "JIT": "1"},
        K.UNAVAILABLE,
        says=(f"{P}PORTABLE='maybe' is not a boolean", f"fix or unset {P}PORTABLE"),
    ),
    Case(
        "a zipped package with PORTABLE and JIT stays unavailable",
        torch_info(),
        ZIPPED,
        {P + "PORTABLE": "1", P + "JIT": "1"},
        K.UNAVAILABLE,
        says=("inside the zip archive /x/site.zip", "install it unzipped"),
        never=("JIT builds",),
    ),
    # Issue 36 item 9: the JIT is offered only where it can serve. A torch no native
    # library can be built for gets the portable table from the JIT (rule 11), silently,
    # and is never told that JIT=1 builds "a library for this torch".
    Case(
        "manifest corrupt on a torch older than the range with JIT builds the portable table",
        torch_info("2.2.2+cu121"),
        BROKEN,
        {P + "JIT": "1"},
        K.PORTABLE,
        says=("no usable manifest", "torch 2.2.2+cu121 is older than any native build"),
    ),
    Case(
        "manifest corrupt on a torch older than the range offers the portable JIT",
        torch_info("2.2.2+cu121"),
        BROKEN,
        {},
        K.UNAVAILABLE,
        says=(
            "no usable manifest",
            "builds for torch 2.4-2.15",
            f"{P}JIT=1 to build the portable table",
        ),
        never=("build a library for this torch",),
    ),
    Case(
        "manifest corrupt on an XPU torch with JIT builds the portable table",
        torch_info("2.8.0+xpu", Backend.XPU, True),
        BROKEN,
        {P + "JIT": "1"},
        K.PORTABLE,
    ),
    Case("no match with jit", torch_info("2.5.0"), FULL, {P + "JIT": "yes"}, K.JIT),
    Case(
        "unparsable torch version",
        torch_info("nightly"),
        FULL,
        {},
        K.UNAVAILABLE,
        says=("not a torch version",),
        never=(f"{P}JIT=1", "--no-build-isolation"),
    ),
    Case(
        "unparsable torch version with JIT builds the portable table, not the native one",
        torch_info("nightly"),
        FULL,
        {P + "JIT": "1"},
        K.PORTABLE,
        says=("not a torch version", "builds the portable table"),
    ),
]


PORT = portable_entry()
PORT_FT = portable_entry("3.14t")
PORT_312 = portable_entry("abi3.12")
WITH_PORT = (*FULL, PORT)
XPU = Backend.XPU

# The portable table's rows (issue 30): defer -> native -> JIT -> portable -> unavailable.
PORTABLE_CASES = [
    Case("portable: native match still wins", torch_info(), WITH_PORT, {}, K.LOAD, CUDA26),
    Case(
        "portable: abi mismatch gets the portable table",
        torch_info(abi=True),
        (CUDA26, CPU26, PORT),
        {},
        K.PORTABLE,
        PORT,
        says=("no bundled library matches torch 2.6.0+cu124", "the portable table serves it"),
    ),
    Case(
        "portable: torch 2.2 (below the range) is served",
        torch_info("2.2.2+cu121"),
        WITH_PORT,
        {},
        K.PORTABLE,
        PORT,
    ),
    Case(
        "portable: torch 2.0 with JIT is served by the bundled table, no JIT",
        torch_info("2.0.1"),
        WITH_PORT,
        {P + "JIT": "1"},
        K.PORTABLE,
        PORT,
    ),
    Case(
        "portable: torch 2.2 without _to_dlpack stays unavailable",
        torch_info("2.2.2", has_to_dlpack=False),
        WITH_PORT,
        {},
        K.UNAVAILABLE,
        says=("has no torch._C._to_dlpack",),
    ),
    Case(
        "portable: a gpu torch with only a cpu library",
        torch_info("2.8.0+cu128", Backend.CUDA, True),
        (CPU28, PORT),
        {},
        K.PORTABLE,
        PORT,
    ),
    Case(
        "portable: BACKEND=cpu on a gpu torch still takes the cpu library",
        torch_info("2.8.0+cu128", Backend.CUDA, True),
        (CPU28, PORT),
        {P + "BACKEND": "cpu"},
        K.LOAD,
        CPU28,
    ),
    Case(
        "portable: a gpu torch with JIT builds the native one first",
        torch_info("2.8.0+cu128", Backend.CUDA, True),
        (CPU28, PORT),
        {P + "JIT": "1"},
        K.JIT,
    ),
    Case(
        "portable: an XPU torch gets the portable table",
        torch_info("2.8.0+xpu", XPU, True),
        (CPU28, PORT),
        {},
        K.PORTABLE,
        PORT,
        says=("no native library serves a xpu torch",),
    ),
    Case(
        "portable: an XPU torch without one bundled is unavailable",
        torch_info("2.8.0+xpu", XPU, True),
        (CPU28,),
        {},
        K.UNAVAILABLE,
        says=("no native library serves a xpu torch",),
    ),
    Case(
        "portable: an XPU torch with JIT builds the portable table",
        torch_info("2.8.0+xpu", XPU, True),
        (CPU28,),
        {P + "JIT": "1"},
        K.PORTABLE,
        says=("builds the portable table",),
    ),
    Case(
        "portable: universal wheel stays unavailable without JIT",
        torch_info(),
        (),
        {},
        K.UNAVAILABLE,
        says=("bundles no libraries",),
    ),
    Case(
        "portable: universal wheel with JIT builds the native library",
        torch_info(),
        (),
        {P + "JIT": "1"},
        K.JIT,
    ),
    Case(
        "portable: PORTABLE=1 over a matching native library",
        torch_info(),
        WITH_PORT,
        {P + "PORTABLE": "1"},
        K.PORTABLE,
        PORT,
        says=(f"{P}PORTABLE asks for the portable table",),
    ),
    Case(
        "portable: PORTABLE=1 replaces torch's own table (differential tests)",
        torch_info("2.13.0", Backend.CPU, True, has_capsule=True),
        WITH_PORT,
        {P + "PORTABLE": "1"},
        K.PORTABLE,
        PORT,
    ),
    Case(
        "portable: PORTABLE=1 without one bundled",
        torch_info(),
        FULL,
        {P + "PORTABLE": "1"},
        K.UNAVAILABLE,
        says=(f"{P}PORTABLE asks for the portable table", "no portable table is bundled"),
    ),
    Case(
        "portable: PORTABLE=1 on a torch without _to_dlpack offers nothing that cannot serve",
        torch_info(has_to_dlpack=False),
        WITH_PORT,
        {P + "PORTABLE": "1"},
        K.UNAVAILABLE,
        says=("has no torch._C._to_dlpack",),
        never=("pip install", f"{P}JIT=1"),
    ),
    Case(
        "portable: PORTABLE=1 with JIT and none bundled builds it",
        torch_info(),
        FULL,
        {P + "PORTABLE": "1", P + "JIT": "1"},
        K.PORTABLE,
    ),
    Case(
        "portable: PORTABLE=yes-please is a bad setting",
        torch_info(),
        WITH_PORT,
        {P + "PORTABLE": "please"},
        K.UNAVAILABLE,
        says=(f"{P}PORTABLE='please' is not a boolean",),
    ),
    Case(
        "portable: FORCE never puts the portable table over torch's own",
        torch_info("2.13.0", Backend.CPU, True, has_capsule=True),
        WITH_PORT,
        {P + "FORCE": "1"},
        K.UNAVAILABLE,
    ),
    Case(
        "portable: FORCE on 2.13 still loads a native library that matches",
        torch_info("2.8.0+cpu", Backend.CPU, True, has_capsule=True),
        WITH_PORT,
        {P + "FORCE": "1"},
        K.LOAD,
        CPU28,
    ),
    Case(
        "portable: DISABLE still disables",
        torch_info("2.2.0"),
        WITH_PORT,
        {P + "DISABLE": "1"},
        K.DISABLED,
    ),
    Case(
        "portable: torch with the API still defers",
        torch_info("2.13.0", Backend.CPU, True, has_capsule=True),
        WITH_PORT,
        {},
        K.DEFER,
    ),
    Case(
        "portable: a free-threaded python skips the abi3 table",
        torch_info("2.2.0", freethreaded=True),
        (PORT, PORT_FT),
        {},
        K.PORTABLE,
        PORT_FT,
    ),
    Case(
        "portable: an abi3.12 table is not loaded on 3.11",
        torch_info("2.2.0"),
        (PORT_312,),
        {},
        K.UNAVAILABLE,
    ),
    Case(
        "portable: a 3.14t-only table is not loaded on a GIL 3.11",
        torch_info("2.2.0"),
        (PORT_FT,),
        {},
        K.UNAVAILABLE,
    ),
]


@pytest.mark.parametrize("case", CASES + PORTABLE_CASES, ids=[c.id for c in CASES + PORTABLE_CASES])
def test_decide(case: Case, tmp_path: Path) -> None:
    env = dict(case.env)
    if env.get(P + "LIBRARY") == "<lib>":
        (tmp_path / "lib.so").write_bytes(b"\x7fELF")
        env[P + "LIBRARY"] = str(tmp_path / "lib.so")
    settings = read_settings(env)
    decision = decide(case.info, case.manifest, settings)
    assert decision.kind is case.kind, decision
    assert decision.entry == case.entry
    assert decision.fallbacks == case.fallbacks
    if case.env.get(P + "LIBRARY") == "<lib>" and case.kind is K.LOAD:
        assert decision.library == tmp_path / "lib.so"
    else:
        assert decision.library is None
    text = " | ".join((decision.reason, decision.remedy, *decision.warnings))
    for fragment in case.says:
        assert fragment in text, f"{fragment!r} not in {text!r}"
    for fragment in case.never:
        assert fragment not in text, f"{fragment!r} in {text!r}"
    assert bool(decision.warnings) is case.warns, decision.warnings
    if case.kind is K.UNAVAILABLE:
        assert decision.reason
        assert decision.remedy


def test_load_and_jit_carry_the_portable_table_as_last_resort() -> None:
    """A native library that fails to load, or a JIT build that fails, falls back to the
    portable table: the decision names it."""
    assert decide(torch_info(), WITH_PORT, Settings()).portable == PORT
    jit = decide(torch_info("2.5.0"), WITH_PORT, read_settings({P + "JIT": "1"}))
    assert (jit.kind, jit.portable) == (K.JIT, PORT)
    # Never under FORCE over torch's own table.
    forced = torch_info("2.8.0+cpu", Backend.CPU, True, has_capsule=True)
    assert decide(forced, WITH_PORT, read_settings({P + "FORCE": "1"})).portable is None


def test_manifest_not_needed_when_torch_defers_on_any_backend() -> None:
    for backend in Backend:
        info = torch_info("2.10.0", backend, True, has_capsule=True)
        assert not manifest_needed(info, Settings())
    assert manifest_needed(torch_info(), Settings())
    assert not manifest_needed(torch_info(), Settings(disable=True))
    assert manifest_needed(torch_info(has_capsule=True), Settings(force=True))


class _Exploding(Sequence[ManifestEntry]):
    """A manifest whose use fails the test: proves a rule never looked at it."""

    def __getitem__(self, index: Any) -> Any:
        raise AssertionError("manifest was read")

    def __len__(self) -> int:
        raise AssertionError("manifest was read")

    def __iter__(self) -> Any:
        raise AssertionError("manifest was read")


@pytest.mark.parametrize("backend", list(Backend))
def test_defer_never_reads_manifest(backend: Backend) -> None:
    info = torch_info("2.10.0", backend, True, has_capsule=True)
    assert decide(info, _Exploding(), Settings()).kind is K.DEFER


def test_decision_is_frozen() -> None:
    decision = decide(torch_info(), FULL, Settings())
    assert isinstance(decision, Decision)
    with pytest.raises(AttributeError):  # immutable (a NamedTuple)
        decision.kind = K.DEFER  # type: ignore[misc]


@pytest.mark.parametrize("jit", [False, True], ids=["plain", "jit"])
def test_a_torch_older_than_the_range_is_never_sent_to_the_native_jit(jit: bool) -> None:
    """Issue 21 item 14: torch 2.3.1 was told to try JIT=1, which then failed with a
    clipped layout message. No native library is ever built for it. Issue 30: where no
    portable table is bundled it is told so, with the range; JIT=1 then builds the
    portable table (C only), never the native one."""
    settings = read_settings({P + "JIT": "1"} if jit else {})
    decision = decide(torch_info("2.3.1+cu121", abi=False), FULL, settings)
    native_range = (
        f"torch 2.3.1+cu121 is not supported: torch-c-dlpack-ext {__version__} builds "
        "for torch 2.4-2.15"
    )
    if jit:
        assert (decision.kind, decision.entry) == (K.PORTABLE, None), decision
        assert decision.reason.startswith(native_range)
        assert "builds the portable table" in decision.reason
        return
    assert decision.kind is K.UNAVAILABLE, decision
    assert decision.reason == native_range
    assert decision.remedy.startswith("use torch 2.4 or newer")
    assert "JIT" not in decision.reason + decision.remedy


def test_a_torch_older_than_the_range_gets_the_bundled_portable_table() -> None:
    """Issue 30: torch 2.0-2.3 were refused by `_unsupported_torch`; they are served."""
    decision = decide(torch_info("2.3.1+cu121", abi=False), WITH_PORT, Settings())
    assert (decision.kind, decision.entry) == (K.PORTABLE, PORT), decision
    assert decision.warnings == ()


def test_a_torch_newer_than_the_range_without_the_api_is_told_to_upgrade_us() -> None:
    decision = decide(torch_info("2.16.0", Backend.CPU, True), FULL, Settings())
    assert decision.kind is K.UNAVAILABLE, decision
    assert "torch 2.16.0 is not supported" in decision.reason
    assert "builds for torch 2.4-2.15" in decision.reason
    assert decision.remedy.startswith("upgrade torch-c-dlpack-ext")


def test_a_bundled_library_still_serves_its_torch_outside_the_range() -> None:
    # The range never overrides the manifest: what is bundled and matches, loads.
    odd = entry("2.3", "cuda", False, "2.3.1+cu121")
    decision = decide(torch_info("2.3.1+cu121", abi=False), (odd,), Settings())
    assert decision.kind is K.LOAD
    assert decision.entry == odd


def test_the_supported_range_is_the_layouts_the_driver_checks() -> None:
    from _torch_c_dlpack_ext_core import torchchecks
    from _torch_c_dlpack_ext_core.naming import TORCH_RANGE

    heads = torchchecks.THPVARIABLE_HEADS
    assert (heads[0][0], heads[-1][1]) == TORCH_RANGE
    # Contiguous: each range starts one minor after the previous one ends.
    for (_, end, _), (start, _, _) in zip(heads, heads[1:]):
        assert start == (end[0], end[1] + 1)


def test_decide_is_pure() -> None:
    info, settings = torch_info(), Settings()
    assert decide(info, FULL, settings) == decide(info, FULL, settings)


def test_broken_manifest_is_not_called_a_universal_wheel() -> None:
    decision = decide(torch_info(), BROKEN, Settings())
    text = decision.reason + decision.remedy
    assert "universal wheel" not in text, text
    assert "bundles no libraries" not in text, text
    assert text.count("pip install") == 1, text


# The GPU selector table (issue 13): a GPU torch x its library present / absent (a CPU one
# bundled) / nothing for this torch / the manifest broken x BACKEND / JIT. A CPU library
# may serve a GPU torch only when BACKEND=cpu asks for it.
GPU_TORCH = {
    Backend.CUDA: torch_info("2.8.0+cu128", Backend.CUDA, True),
    Backend.ROCM: torch_info("2.8.0+rocm6.3", Backend.ROCM, True),
}
GPU_ENTRY = {Backend.CUDA: CUDA28, Backend.ROCM: ROCM28}
LIBRARY_STATES = ("present", "absent", "nothing", "broken")
ENVS = {
    "": {},
    "BACKEND=cpu": {P + "BACKEND": "cpu"},
    "JIT": {P + "JIT": "1"},
    "BACKEND=cpu+JIT": {P + "BACKEND": "cpu", P + "JIT": "1"},
}


def gpu_manifest(backend: Backend, state: str) -> Sequence[ManifestEntry] | ManifestError:
    other = entry("2.6", "cpu", False)
    return {
        "present": (GPU_ENTRY[backend], CPU28, other),
        "absent": (CPU28, other, CUDA28 if backend is Backend.ROCM else ROCM28),
        "nothing": (other,),
        "broken": BROKEN,
    }[state]


def gpu_expected(
    backend: Backend, state: str, env: str
) -> tuple[DecisionKind, ManifestEntry | None, Backend]:
    wants_cpu, jit = env.startswith("BACKEND=cpu"), "JIT" in env
    chosen = Backend.CPU if wants_cpu else backend
    if state == "present":
        return K.LOAD, CPU28 if wants_cpu else GPU_ENTRY[backend], chosen
    if state == "absent" and wants_cpu:
        return K.LOAD, CPU28, chosen
    return (K.JIT if jit else K.UNAVAILABLE), None, chosen


@pytest.mark.parametrize("env", list(ENVS))
@pytest.mark.parametrize("state", LIBRARY_STATES)
@pytest.mark.parametrize("backend", [Backend.CUDA, Backend.ROCM])
def test_gpu_torch_never_gets_a_library_that_cannot_serve_its_backend(
    backend: Backend, state: str, env: str
) -> None:
    decision = decide(GPU_TORCH[backend], gpu_manifest(backend, state), read_settings(ENVS[env]))
    kind, chosen_entry, chosen_backend = gpu_expected(backend, state, env)
    assert (decision.kind, decision.entry, decision.backend) == (
        kind,
        chosen_entry,
        chosen_backend,
    ), decision
    # The invariant behind the table: every library the loader may try is of the chosen
    # backend, and that is the torch's own backend unless BACKEND=cpu said otherwise.
    candidates = [decision.entry, *decision.fallbacks] if decision.entry else []
    assert bool(candidates) is (kind is K.LOAD), decision
    for candidate in candidates:
        assert candidate.backend is chosen_backend, decision
    if kind is K.UNAVAILABLE and not env.startswith("BACKEND=cpu") and state == "absent":
        text = decision.reason + " | " + decision.remedy
        assert f"{P}JIT=1 to build the {backend.value} library" in text, text
        assert "install a torch-c-dlpack-ext wheel that bundles it" in text, text
        assert f"{P}BACKEND=cpu" in text, text


BOGUS = "torch.Tensor.__dlpack_c_exchange_api__ is int 5, not a 'dlpack_exchange_api' capsule"


@pytest.mark.parametrize(
    ("env", "manifest", "kind"),
    [
        ({}, FULL, K.LOAD),
        ({}, (), K.UNAVAILABLE),
        ({}, BROKEN, K.UNAVAILABLE),
        ({P + "JIT": "1"}, (), K.JIT),
        ({P + "BAKEND": "x"}, FULL, K.UNAVAILABLE),
    ],
)
def test_bogus_torch_attribute_is_not_deferred_to_and_is_named(
    env: dict[str, str], manifest: Any, kind: DecisionKind
) -> None:
    info = torch_info()._replace(bogus_attributes=(BOGUS,))
    decision = decide(info, manifest, read_settings(env))
    assert decision.kind is kind, decision
    assert decision.warnings[0] == BOGUS + ": ignored", decision.warnings


def test_bogus_attribute_is_quiet_when_disabled() -> None:
    info = torch_info()._replace(bogus_attributes=(BOGUS,))
    decision = decide(info, FULL, read_settings({P + "DISABLE": "1"}))
    assert decision.kind is K.DISABLED
    assert decision.warnings == ()


@pytest.mark.parametrize(
    "version",
    ["2." + "9" * 5000, "9" * 5000 + ".1.0", "2.1234567890.0"],
    ids=["minor", "major", "ten-digits"],
)
def test_unparsable_huge_version_names_the_cause(version: str) -> None:
    """A version whose numbers int() refuses (over 4300 digits) or no torch has is "not a
    torch version" with the value clipped, not an internal error."""
    decision = decide(torch_info(version, Backend.CPU), [CPU26], Settings())
    assert decision.kind is K.UNAVAILABLE, decision
    assert "not a torch version" in decision.reason, decision.reason
    assert len(decision.reason) < 300, decision.reason


def test_status_names_the_portable_table_its_cost_and_how_to_get_native_speed() -> None:
    from torch_c_dlpack_ext._costs import MEASURED_ON, PORTABLE_COST
    from torch_c_dlpack_ext._status import Status
    from torch_c_dlpack_ext._wording import cost_line

    status = Status(
        kind=K.PORTABLE,
        library=Path("/x/libtorch_c_dlpack_ext-portable.so"),
        torch=torch_info("2.6.0+cu124", abi=True),
        settings=Settings(),
    )
    assert status.published
    assert status.portable
    text = " ".join(str(status).split())
    assert "portable table" in text
    assert f"{PORTABLE_COST['portable_export_ns']} ns per export" in text
    # The running torch (the test environment's) has its headers: the JIT is offered.
    assert f"for native speed set {P}JIT=1" in text, text
    assert f"~{PORTABLE_COST['native_export_ns']} and" in cost_line()
    assert f"nox -s bench: {MEASURED_ON}" in cost_line()
    assert "cost" not in str(Status(kind=K.LOAD, library=Path("/x/lib.so")))
    assert Status(kind=K.LOAD, torch=torch_info()).native_speed == ""


def _range() -> str:
    from _torch_c_dlpack_ext_core.naming import TORCH_RANGE

    (lo, hi) = TORCH_RANGE
    return f"{lo[0]}.{lo[1]}-{hi[0]}.{hi[1]}"


NO_HEADERS = "torch 2.6.0 has no C++ headers (/usr/lib/torch/include does not exist)"

#: Issue 36 item 9: the portable table's "for native speed" line, by (torch, settings, why
#: torch's headers cannot be used): the JIT only where it could build a native library for
#: this torch and is not set already; otherwise why native speed is out of reach.
NATIVE_SPEED = [
    ("in range", torch_info(), {}, "", (f"for native speed set {P}JIT=1",), ()),
    (
        "JIT already set",
        torch_info(),
        {P + "JIT": "1"},
        "",
        (f"{P}JIT is set, but its build of the native library failed",),
        (f"set {P}JIT=1",),
    ),
    (
        "older than the range",
        torch_info("2.2.2+cu121"),
        {},
        "",
        ("native speed is out of reach: torch 2.2.2+cu121 is older than any native build",),
        (f"{P}JIT",),
    ),
    (
        "older than the range, JIT set",
        torch_info("2.2.2+cu121"),
        {P + "JIT": "1"},
        "",
        ("older than any native build",),
        (f"{P}JIT",),
    ),
    (
        "newer than the range",
        torch_info("2.16.0", Backend.CPU, True),
        {},
        "",
        ("torch 2.16.0 is newer than any native build",),
        (f"{P}JIT",),
    ),
    (
        "a version that names no release",
        torch_info("nightly", Backend.CPU, True),
        {},
        "",
        ("names no release (a dev build?)",),
        (f"{P}JIT",),
    ),
    (
        "an XPU torch",
        torch_info("2.8.0+xpu", Backend.XPU, True),
        {},
        "",
        ("no native library exists for xpu torches",),
        (f"{P}JIT",),
    ),
    (
        "no headers",
        torch_info(),
        {},
        NO_HEADERS,
        (f"native speed is out of reach: {NO_HEADERS}",),
        (f"{P}JIT",),
    ),
    (
        "PORTABLE chose it",
        torch_info(),
        {P + "PORTABLE": "1", P + "JIT": "1"},
        "",
        (f"for native speed unset {P}PORTABLE",),
        (f"{P}JIT",),
    ),
]


@pytest.mark.parametrize(
    ("info", "env", "headers", "says", "never"),
    [case[1:] for case in NATIVE_SPEED],
    ids=[case[0] for case in NATIVE_SPEED],
)
def test_native_speed_offers_the_jit_only_where_it_can_serve(
    info: TorchInfo,
    env: dict[str, str],
    headers: str,
    says: tuple[str, ...],
    never: tuple[str, ...],
) -> None:
    from torch_c_dlpack_ext._wording import native_speed

    text = native_speed(info, read_settings(env), headers=headers)
    for fragment in says:
        assert fragment in text, f"{fragment!r} not in {text!r}"
    for fragment in never:
        assert fragment not in text, f"{fragment!r} in {text!r}"


def test_the_range_native_speed_names_is_the_one_the_decision_names() -> None:
    """One source for the range (naming.TORCH_RANGE): the reason on the same screen and
    the native-speed line say the same numbers."""
    from torch_c_dlpack_ext._wording import native_speed

    info = torch_info("2.2.2+cu121")
    reason = decide(info, FULL, Settings()).reason
    assert f"builds for torch {_range()}" in reason
    assert f"builds for torch {_range()}" in native_speed(info, Settings())


def test_native_speed_of_a_library_override() -> None:
    from torch_c_dlpack_ext._wording import native_speed

    text = native_speed(torch_info(), Settings(library=Path("/x/portable.so"), jit=True))
    assert text == f"for native speed point {P}LIBRARY at a native library, or unset it"


def test_the_status_looks_for_the_running_torchs_headers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The status's native-speed line reads torch's headers where the JIT would (beside
    torch/__init__.py): a torch without them is not offered the JIT."""
    import sys
    import types

    from torch_c_dlpack_ext._jit import headers_problem
    from torch_c_dlpack_ext._status import Status

    fake = types.ModuleType("torch")
    fake.__file__ = str(tmp_path / "torch" / "__init__.py")
    fake.__version__ = "2.6.0"
    assert "has no C++ headers" in headers_problem(fake)
    (tmp_path / "torch" / "include").mkdir(parents=True)
    assert headers_problem(fake) == ""
    fake.__file__ = None
    assert "has no __file__" in headers_problem(fake)
    assert headers_problem(None) == ""

    fake.__file__ = str(tmp_path / "elsewhere" / "__init__.py")
    monkeypatch.setitem(sys.modules, "torch", fake)
    status = Status(kind=K.PORTABLE, torch=torch_info("2.6.0", abi=True), settings=Settings())
    text = " ".join(str(status).split())
    assert "native speed is out of reach: torch 2.6.0 has no C++ headers" in text, text
    assert f"{P}JIT" not in text, text


#: Where a copy came from (its installation record), and what its remedies may pin.
SOURCES = {
    "index": InstallSource(installer="pip"),
    "dir": InstallSource(InstallKind.DIR, "/home/me/src/torch-c-dlpack-ext"),
    "unrecorded": InstallSource(InstallKind.UNRECORDED, "/home/me/src/torch-c-dlpack-ext/python"),
}
#: Decisions whose remedy names an installation command.
REMEDIES = {
    "broken manifest": (torch_info(), BROKEN, {}),
    "universal wheel": (torch_info(), (), {}),
    "gpu library missing": (torch_info("2.8.0+cu128", Backend.CUDA, True), (CPU28,), {}),
    "PORTABLE none bundled": (torch_info(), FULL, {P + "PORTABLE": "1"}),
    "PORTABLE broken manifest": (torch_info(), BROKEN, {P + "PORTABLE": "1"}),
    "xpu": (torch_info("2.8.0+xpu", Backend.XPU, True), (CPU28,), {}),
}


@pytest.mark.parametrize("where", list(SOURCES))
@pytest.mark.parametrize("remedy", list(REMEDIES))
def test_a_remedy_pins_a_version_only_for_an_index_install(remedy: str, where: str) -> None:
    """Issue 36 deliverable 5: the remedies that used the pinned REINSTALL constant
    whatever the source (PORTABLE's, the XPU torch's) install from where this copy came
    from, and a copy with no installation record is never told to install a pinned
    version from an index."""
    info, manifest, env = REMEDIES[remedy]
    decision = decide(info, manifest, read_settings(env), source=SOURCES[where])
    assert decision.kind is K.UNAVAILABLE, decision
    pinned = f"torch-c-dlpack-ext=={__version__}"
    if where == "index":
        assert pinned in decision.remedy, decision.remedy
        return
    assert pinned not in decision.remedy, decision.remedy
    if where == "dir":
        assert "/home/me/src/torch-c-dlpack-ext" in decision.remedy, decision.remedy
    else:
        assert "<a checkout or the sdist" in decision.remedy or (
            "no installation record for this copy" in decision.remedy
        ), decision.remedy
