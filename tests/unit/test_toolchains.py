"""The toolchain registry: each platform's toolchain, its names, its argv shape and its audit.

Table tests, no compiler: the argv of each toolchain is built from a hand-written
:class:`CompileJob`; ``test_compile_args.py`` checks the same argv through the driver.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from _torch_c_dlpack_ext_core.errors import BuildError, ConfigError
from _torch_c_dlpack_ext_core.naming import (
    PLATFORM_TOOLCHAINS,
    SHARED_LIBRARY_NAMING,
    library_filename,
    shared_library_suffix,
)
from _torch_c_dlpack_ext_core.toolchains import (
    TOOLCHAINS,
    AuditOutcome,
    CompileJob,
    toolchain_for,
)
from _torch_c_dlpack_ext_core.toolchains.unix import FLAGS, macro_prefix_maps

TORCH_STEMS = ("c10", "torch_cpu", "torch", "torch_python")
GPU_STEMS = ("c10_cuda", "torch_cuda", "c10_hip", "torch_hip")


@pytest.mark.parametrize(
    ("platform", "expected"),
    [
        # (toolchain, file prefix, suffix, dual ABI, the file -lc10 / c10.lib reads)
        ("linux", ("gnu", "lib", ".so", True, "libc10.so")),
        ("darwin", ("darwin", "lib", ".dylib", False, "libc10.dylib")),
        ("win32", ("msvc", "", ".dll", False, "c10.lib")),
    ],
)
def test_each_platform_has_its_toolchain(
    platform: str, expected: tuple[str, str, str, bool, str]
) -> None:
    name, prefix, suffix, dual_abi, c10 = expected
    toolchain = toolchain_for(platform)
    assert toolchain is TOOLCHAINS[name]
    assert toolchain.name == name
    assert (toolchain.library_prefix, toolchain.library_suffix) == (prefix, suffix)
    assert shared_library_suffix(platform) == suffix
    assert toolchain.dual_abi is dual_abi
    assert toolchain.link_library_name("c10") == c10
    abi = False if dual_abi else None
    filename = library_filename(2, 8, "cpu", abi, platform=platform)
    assert filename.startswith(f"{prefix}torch_c_dlpack_ext-torch2.8-cpu")
    assert filename.endswith(suffix)


def test_the_registry_and_naming_name_the_same_toolchains() -> None:
    assert set(TOOLCHAINS) == set(PLATFORM_TOOLCHAINS.values()) == set(SHARED_LIBRARY_NAMING)
    assert all(toolchain.name == key for key, toolchain in TOOLCHAINS.items())


@pytest.mark.parametrize("platform", ["freebsd14", "cygwin", "emscripten", "linux2", "macos"])
def test_unknown_platform_is_a_typed_error(platform: str) -> None:
    with pytest.raises(ConfigError, match=rf"unsupported platform '{platform}'.*linux, darwin"):
        toolchain_for(platform)


def _job(tmp_path: Path, *, exports: bool, python_lib: Path | None = None) -> CompileJob:
    source_dir = tmp_path / "csrc"
    source_dir.mkdir(exist_ok=True)
    if exports:
        (source_dir / "exports.map").write_text("{ global: Foo; Bar; local: *; };\n")
    return CompileJob(
        cxx="CXX",
        std="c++17",
        defines=("TCDE_BACKEND_CPU", 'TCDE_TORCH_BUILD="2.8.0"'),
        includes=(Path("/dl"), Path("/torch/include")),
        sources=(source_dir / "a.cc",),
        source_dir=source_dir,
        lib_dir=Path("/torch/lib"),
        libraries=TORCH_STEMS,
        filename="NAME",
        python_import_lib=python_lib,
    )


@pytest.mark.parametrize("exports", [True, False])
def test_gnu_command_shape(tmp_path: Path, exports: bool) -> None:
    job = _job(tmp_path, exports=exports)
    cmd = toolchain_for("linux").command(job, "OUT", "SCRATCH")
    script = [f"-Wl,--version-script={job.source_dir / 'exports.map'}"] if exports else []
    assert cmd == [
        "CXX",
        *FLAGS,
        "-std=c++17",
        "-DTCDE_BACKEND_CPU",
        '-DTCDE_TORCH_BUILD="2.8.0"',
        "-I/dl",
        "-I/torch/include",
        "-fmacro-prefix-map=/dl/=",
        "-fmacro-prefix-map=/torch/include/=",
        f"-fmacro-prefix-map={job.source_dir}/=csrc/",
        str(job.sources[0]),
        "-o",
        "OUT",
        "-Wl,--strip-all",
        "-Wl,-z,noseparate-code",
        *script,
        "-ldl",
        "-L/torch/lib",
        "-lc10",
        "-ltorch_cpu",
        "-ltorch",
        "-ltorch_python",
    ]


def test_macro_prefix_maps_put_the_most_specific_last_and_skip_unsplittable(
    tmp_path: Path,
) -> None:
    # GCC applies the last matching map, clang the longest: a directory inside another
    # (torch's api/include inside its include) must come after it for both.
    job = dataclasses.replace(
        _job(tmp_path, exports=False),
        includes=(Path("/t/include/torch/csrc/api/include"), Path("/t/include"), Path("/a=b")),
    )
    # Otherwise in the given order, whatever the paths' lengths (a venv's own), so that
    # the JIT cache key, which replaces each location by a placeholder, stays one.
    assert macro_prefix_maps(job) == [
        "-fmacro-prefix-map=/t/include/=",
        f"-fmacro-prefix-map={job.source_dir}/=csrc/",
        "-fmacro-prefix-map=/t/include/torch/csrc/api/include/=",
    ]  # /a=b cannot be written as OLD=NEW
    longer = dataclasses.replace(
        job,
        includes=(
            Path("/a-much-longer-root/t/include/torch/csrc/api/include"),
            Path("/a-much-longer-root/t/include"),
        ),
    )
    assert [m.split("/=")[0].split("/")[-1] for m in macro_prefix_maps(longer)] == [
        "include",
        "csrc",
        "include",
    ]
    assert macro_prefix_maps(longer)[-1].endswith("/torch/csrc/api/include/=")


@pytest.mark.parametrize("exports", [True, False])
def test_darwin_command_shape_and_export_list(tmp_path: Path, exports: bool) -> None:
    job = _job(tmp_path, exports=exports)
    darwin = toolchain_for("darwin")
    cmd = darwin.command(job, "OUT", "SCRATCH")
    assert cmd[: 1 + len(FLAGS) + 2] == ["CXX", *FLAGS, "-undefined", "dynamic_lookup"]
    link = cmd[cmd.index("OUT") + 1 : cmd.index("-L/torch/lib")]
    export_list = ["-Wl,-exported_symbols_list,SCRATCH/exports.darwin.txt"] if exports else []
    assert link == [*export_list, "-Wl,-x", "-Wl,-install_name,@rpath/NAME"]
    assert cmd[-4:] == ["-lc10", "-ltorch_cpu", "-ltorch", "-ltorch_python"]
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    darwin.prepare_scratch(job, scratch)
    written = {p.name: p.read_text() for p in scratch.iterdir()}
    assert written == ({"exports.darwin.txt": "_Foo\n_Bar\n"} if exports else {})


def test_msvc_command_shape(tmp_path: Path) -> None:
    python_lib = tmp_path / "libs" / "python311.lib"
    job = _job(tmp_path, exports=True, python_lib=python_lib)
    cmd = toolchain_for("win32").command(job, "OUT.dll", "S")
    assert cmd[:2] == ["CXX", "/nologo"]
    assert "/std:c++17" in cmd
    assert '/DTCDE_TORCH_BUILD="2.8.0"' in cmd
    assert cmd[cmd.index("/link") :] == [
        "/link",
        "/LIBPATH:/torch/lib",
        "c10.lib",
        "torch_cpu.lib",
        "torch.lib",
        "torch_python.lib",
        f"/LIBPATH:{python_lib.parent}",
        "python311.lib",
        "/IMPLIB:S\\NAME.lib",
    ]
    with pytest.raises(BuildError, match="needs python_import_lib"):
        toolchain_for("win32").command(_job(tmp_path, exports=False), "OUT.dll", "S")


@pytest.mark.parametrize(
    ("platform", "checks"), [("linux", False), ("darwin", True), ("win32", True)]
)
def test_which_toolchains_check_torch_libraries_before_the_link(
    tmp_path: Path, platform: str, checks: bool
) -> None:
    # GNU ld names a missing -l itself; ld64 and link.exe are checked first (a clearer error).
    toolchain = toolchain_for(platform)
    (tmp_path / toolchain.link_library_name("c10")).write_bytes(b"")
    missing = toolchain.missing_link_libraries(tmp_path, ("c10", "torch"))
    assert missing == ([toolchain.link_library_name("torch")] if checks else [])


@pytest.mark.parametrize("platform", ["linux", "darwin"])
def test_only_msvc_links_the_python_import_library(platform: str, tmp_path: Path) -> None:
    assert toolchain_for(platform).python_import_library(tmp_path / "python311.lib") is None
    with pytest.raises(BuildError, match=r"no Python import library"):
        toolchain_for("win32").python_import_library(tmp_path / "python311.lib")


@pytest.mark.parametrize("platform", ["darwin", "win32"])
def test_audit_is_not_applicable_off_elf(platform: str, tmp_path: Path) -> None:
    class Torch:
        root = tmp_path
        version = "2.8.0"
        lib_dir = tmp_path
        cxx11_abi = None

    outcome = toolchain_for(platform).audit(tmp_path / "lib", Torch(), "cpu")
    assert outcome is AuditOutcome.NOT_APPLICABLE


def test_repair_excludes_are_torch_and_its_gpu_runtimes() -> None:
    gnu, darwin, msvc = (toolchain_for(p) for p in ("linux", "darwin", "win32"))
    torch_libs = {gnu.link_library_name(stem) for stem in (*TORCH_STEMS, *GPU_STEMS)}
    assert set(gnu.repair_excludes) == torch_libs | {"libcudart.so.*", "libamdhip64.so.*"}
    # macOS wheels are CPU only.
    assert set(darwin.repair_excludes) == {darwin.link_library_name(s) for s in TORCH_STEMS}
    assert msvc.repair_excludes == ()


def test_only_the_gnu_toolchain_leaves_libtorch_python_unlinked() -> None:
    # Linux looks up csrc/'s three torch_python symbols at run time (csrc/tcde_python.h,
    # keyed on the same platform); macOS and Windows link it as before.
    from _torch_c_dlpack_ext_core.driver import _torch_libraries
    from _torch_c_dlpack_ext_core.naming import Backend

    linked = {name: tc.links_torch_python for name, tc in TOOLCHAINS.items()}
    assert linked == {name: name not in ("gnu", "gnu-aarch64") for name in TOOLCHAINS}
    assert _torch_libraries(Backend.CPU, torch_python=False) == ("c10", "torch_cpu")
    assert _torch_libraries(Backend.CUDA, torch_python=False) == ("c10", "torch_cpu", "c10_cuda")
    assert _torch_libraries(Backend.ROCM, torch_python=False) == ("c10", "torch_cpu", "c10_hip")
    assert _torch_libraries(Backend.CUDA, torch_python=True) == (
        *TORCH_STEMS,
        "c10_cuda",
        "torch_cuda",
    )
