"""Driver argument validation: each bad input gets its typed error, a message naming what
is wrong and the fix, and leaves nothing in the output directory. No compiling here (the
real compiler is only asked for ``--version``)."""

from __future__ import annotations

import dataclasses
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from torch_c_dlpack_ext import _compile
from torch_c_dlpack_ext._compile import BuildPlan, compile_library, plan_build
from torch_c_dlpack_ext._naming import Backend
from torch_c_dlpack_ext.errors import (
    ABIMismatchError,
    BackendUnavailableError,
    BuildError,
    CompilerNotFoundError,
    DLPackHeaderNotFoundError,
    GPUHeadersNotFoundError,
    InvalidBackendError,
    TorchInstallError,
)

FakeTorch = Callable[..., Path]

CUDA_LIBS = ("libc10.so", "libtorch_cpu.so", "libc10_cuda.so", "libtorch_cuda.so")
ROCM_LIBS = ("libc10.so", "libtorch_cpu.so", "libc10_hip.so", "libtorch_hip.so")
GPU_VARS = ("CUDA_HOME", "CUDA_PATH", "ROCM_PATH", "ROCM_HOME", "CXX")
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux dual ABI")


@dataclasses.dataclass
class Inputs:
    """Valid inputs of one build; each test breaks exactly one of them."""

    fake_torch: FakeTorch
    tmp: Path
    output_dir: Path
    dlpack_include: Path
    sources: Path
    cxx: str

    def build(self, prefix: Path | None = None, **kwargs: object) -> None:
        options: dict[str, object] = {
            "torch": prefix or self.fake_torch(),
            "backend": "cpu",
            "output_dir": self.output_dir,
            "dlpack_include": self.dlpack_include,
            "source_dir": self.sources,
        }
        options.update(kwargs)
        compile_library(**options)  # type: ignore[arg-type]

    def plan(self, prefix: Path, **kwargs: object) -> BuildPlan:
        options: dict[str, object] = {
            "torch": prefix,
            "backend": "cpu",
            "output_dir": self.output_dir,
            "dlpack_include": self.dlpack_include,
            "source_dir": self.sources,
            "cxx": self.cxx,
        }
        options.update(kwargs)
        return plan_build(**options)  # type: ignore[arg-type]

    def assert_output_dir_empty(self) -> None:
        assert sorted(p.name for p in self.output_dir.iterdir()) == []


@pytest.fixture
def inputs(
    fake_torch: FakeTorch, dlpack_include: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Inputs:
    for var in GPU_VARS:
        monkeypatch.delenv(var, raising=False)
    sources = tmp_path / "csrc"
    sources.mkdir()
    (sources / "a.cc").write_text("int a() { return 1; }\n", encoding="utf-8")
    (sources / "b.cc").write_text("int b() { return 2; }\n", encoding="utf-8")
    (sources / "common.h").write_text("#pragma once\n", encoding="utf-8")
    output_dir = tmp_path / "out"
    output_dir.mkdir()
    cxx = shutil.which("c++") or shutil.which("g++")
    assert cxx, "the test machine needs a C++ compiler (only its --version is run here)"
    return Inputs(fake_torch, tmp_path, output_dir, dlpack_include, sources, cxx)


def test_unknown_backend(inputs: Inputs) -> None:
    with pytest.raises(InvalidBackendError, match=r"'metal'.*expected one of cpu, cuda, rocm"):
        inputs.build(backend="metal")
    inputs.assert_output_dir_empty()


def test_path_without_torch(inputs: Inputs) -> None:
    with pytest.raises(TorchInstallError, match=r"no torch installation.*install torch there"):
        inputs.build(inputs.tmp / "nothing")
    inputs.assert_output_dir_empty()


@linux_only
@pytest.mark.parametrize(("install_abi", "asked"), [(False, True), (True, False)])
def test_abi_that_contradicts_the_install(inputs: Inputs, install_abi: bool, asked: bool) -> None:
    with pytest.raises(ABIMismatchError) as info:
        inputs.build(inputs.fake_torch(abi=install_abi), cxx11_abi=asked)
    message = str(info.value)
    assert f"cxx11_abi={int(asked)} was requested" in message
    assert f"uses _GLIBCXX_USE_CXX11_ABI={int(install_abi)}" in message
    assert "Leave cxx11_abi unset" in message
    inputs.assert_output_dir_empty()


def test_cuda_on_a_cpu_only_torch(inputs: Inputs) -> None:
    with pytest.raises(BackendUnavailableError, match=r"no cuda support \(libc10_cuda"):
        inputs.build(inputs.fake_torch(cuda=None), backend="cuda")
    inputs.assert_output_dir_empty()


def test_nonexistent_compiler(inputs: Inputs) -> None:
    with pytest.raises(CompilerNotFoundError, match=r"'/nonexistent/g\+\+'.*install one"):
        inputs.build(cxx="/nonexistent/g++")
    inputs.assert_output_dir_empty()


def test_no_compiler_on_path(inputs: Inputs, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = inputs.tmp / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(CompilerNotFoundError, match=r"neither c\+\+ nor g\+\+ is on PATH.*CXX="):
        inputs.build()
    inputs.assert_output_dir_empty()


def test_cxx_variable_naming_a_missing_compiler(
    inputs: Inputs, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CXX", "no-such-compiler-xyz")
    with pytest.raises(CompilerNotFoundError, match=r"'no-such-compiler-xyz' \(from \$CXX\)"):
        inputs.build()
    inputs.assert_output_dir_empty()


def test_cuda_headers_missing(inputs: Inputs) -> None:
    empty = inputs.tmp / "empty-cuda"
    empty.mkdir()
    prefix = inputs.fake_torch(libs=CUDA_LIBS)
    with pytest.raises(GPUHeadersNotFoundError) as info:
        inputs.build(prefix, backend="cuda", gpu_home=empty, cxx=inputs.cxx)
    message = str(info.value)
    assert "cuda_runtime_api.h" in message
    assert f"gpu_home: {empty / 'include'}" in message
    assert "set CUDA_HOME" in message
    assert "nvidia-cuda-runtime-cu12" in message
    inputs.assert_output_dir_empty()


def test_rocm_headers_missing(inputs: Inputs) -> None:
    prefix = inputs.fake_torch(libs=ROCM_LIBS, cuda=None, hip="6.3")
    with pytest.raises(GPUHeadersNotFoundError, match=r"hip_runtime_api\.h.*ROCM_PATH"):
        inputs.build(prefix, backend="rocm", gpu_home=inputs.tmp, cxx=inputs.cxx)
    inputs.assert_output_dir_empty()


def test_dlpack_header_missing(inputs: Inputs) -> None:
    with pytest.raises(DLPackHeaderNotFoundError, match=r"pip install apache-tvm-ffi"):
        inputs.build(dlpack_include=inputs.tmp)
    inputs.assert_output_dir_empty()


def test_dlpack_header_too_old(inputs: Inputs) -> None:
    header = inputs.dlpack_include / "dlpack" / "dlpack.h"
    header.write_text(header.read_text().replace("MINOR_VERSION 3", "MINOR_VERSION 0"))
    with pytest.raises(DLPackHeaderNotFoundError, match=r"DLPack 1\.0.*needs DLPack >= 1\.2"):
        inputs.build()
    inputs.assert_output_dir_empty()


def test_no_sources(inputs: Inputs) -> None:
    with pytest.raises(BuildError, match=r"no C\+\+ sources .*source_dir="):
        inputs.build(source_dir=inputs.output_dir, cxx=inputs.cxx)
    inputs.assert_output_dir_empty()


def test_python_include_without_python_h(inputs: Inputs) -> None:
    with pytest.raises(BuildError, match=r"no Python\.h in .*python3-dev"):
        inputs.build(cxx=inputs.cxx, python_include=inputs.sources)
    inputs.assert_output_dir_empty()


@linux_only
def test_command_follows_the_build_contract(inputs: Inputs) -> None:
    plan = inputs.plan(inputs.fake_torch("2.6.0+cu124", abi=False))
    cmd = plan.command("OUT.so")
    includes = [arg[2:] for arg in cmd if arg.startswith("-I")]
    assert includes[0] == str(inputs.dlpack_include.resolve()), "DLPack >= 1.2 must come first"
    assert includes[1:3] == [str(p) for p in plan.torch.include_dirs]
    assert (Path(includes[3]) / "Python.h").is_file()
    assert len(includes) == 4
    for flag in ("-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-fvisibility-inlines-hidden"):
        assert flag in cmd
    assert "-std=c++17" in cmd
    defines = [arg for arg in cmd if arg.startswith("-D")]
    assert defines == [
        "-DTCDE_BACKEND_CPU",
        "-D_GLIBCXX_USE_CXX11_ABI=0",
        '-DTCDE_TORCH_BUILD="2.6.0+cu124"',
        f'-DTCDE_TOOLCHAIN="{plan.toolchain}"',
        '-DTCDE_GPU_TOOLKIT=""',
    ]
    links = [arg for arg in cmd if arg.startswith("-l")]
    assert links == ["-lc10", "-ltorch_cpu", "-ltorch", "-ltorch_python"]
    assert f"-L{plan.torch.lib_dir}" in cmd
    assert [a for a in cmd if a.endswith(".cc")] == [
        str(inputs.sources / "a.cc"),
        str(inputs.sources / "b.cc"),
    ]
    assert cmd[cmd.index("-o") + 1] == "OUT.so"
    assert plan.filename == "libtorch_c_dlpack_ext-torch2.6-cpu-cxx11abi0.so"


@linux_only
def test_linux_link_strips_and_exports_only_the_version_script(inputs: Inputs) -> None:
    prefix = inputs.fake_torch("2.8.0", abi=True)
    without_script = inputs.plan(prefix).command("OUT.so")
    assert "-Wl,--strip-all" in without_script
    assert not [a for a in without_script if "version-script" in a]
    script = inputs.sources / "exports.map"
    script.write_text("{ global: a; local: *; };\n", encoding="utf-8")
    plan = inputs.plan(prefix)
    cmd = plan.command("OUT.so")
    assert f"-Wl,--version-script={script.resolve()}" in cmd
    # Link options follow the output, before the libraries they apply to.
    assert cmd.index("OUT.so") < cmd.index("-Wl,--strip-all") < cmd.index("-lc10")
    # The script decides the library's exports: editing it must rebuild.
    key = plan.cache_key()
    script.write_text("{ global: a; b; local: *; };\n", encoding="utf-8")
    assert inputs.plan(prefix).cache_key() != key


def test_cxx20_from_torch_2_13(inputs: Inputs) -> None:
    plan = inputs.plan(inputs.fake_torch("2.13.0+cpu", abi=True, cuda=None))
    assert "-std=c++20" in plan.command("x")
    assert "-std=c++17" in inputs.plan(inputs.fake_torch("2.9.1", name="t29")).command("x")


def test_cuda_headers_from_cuda_home(inputs: Inputs, monkeypatch: pytest.MonkeyPatch) -> None:
    home = inputs.tmp / "cuda"
    (home / "include" / "crt").mkdir(parents=True)
    (home / "include" / "cuda_runtime_api.h").write_text("#define CUDART_VERSION 12040\n")
    (home / "include" / "crt" / "host_defines.h").write_text("\n")
    monkeypatch.setenv("CUDA_HOME", str(home))
    plan = inputs.plan(inputs.fake_torch(libs=CUDA_LIBS), backend="cuda")
    cmd = plan.command("x")
    assert plan.gpu_toolkit == "12.4"
    assert [a for a in cmd if a.startswith("-I")][-1] == f"-I{(home / 'include').resolve()}"
    assert "-DTCDE_BACKEND_CUDA" in cmd
    assert '-DTCDE_GPU_TOOLKIT="12.4"' in cmd
    assert cmd[-2:] == ["-lc10_cuda", "-ltorch_cuda"]


def _runtime_wheel(inputs: Inputs, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A fake torch whose env has the nvidia-cuda-runtime-cu12 headers, and no nvcc on PATH."""
    prefix = inputs.fake_torch(libs=CUDA_LIBS)
    site = prefix / "lib" / "python3.11" / "site-packages"
    runtime_include = site / "nvidia" / "cuda_runtime" / "include"
    runtime_include.mkdir(parents=True)
    (runtime_include / "cuda_runtime_api.h").write_text(
        '#include "crt/host_defines.h"\n#define CUDART_VERSION 12040\n'
    )
    no_nvcc = inputs.tmp / "bin"
    no_nvcc.mkdir()
    monkeypatch.setenv("PATH", str(no_nvcc))
    return prefix, site


def test_cuda_headers_from_the_nvidia_wheels_in_the_target_env(
    inputs: Inputs, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix, site = _runtime_wheel(inputs, monkeypatch)
    nvcc_include = site / "nvidia" / "cuda_nvcc" / "include"
    (nvcc_include / "crt").mkdir(parents=True)
    (nvcc_include / "crt" / "host_defines.h").write_text("\n")
    plan = inputs.plan(prefix, backend="cuda")
    runtime_include = site / "nvidia" / "cuda_runtime" / "include"
    assert plan.gpu_includes == (runtime_include.resolve(), nvcc_include.resolve())
    assert plan.gpu_toolkit == "12.4"


def test_runtime_wheel_without_crt_headers_names_the_nvcc_wheel(
    inputs: Inputs, monkeypatch: pytest.MonkeyPatch
) -> None:
    # nvidia-cuda-runtime-cu12 alone lacks crt/host_defines.h, which its headers include.
    prefix, _ = _runtime_wheel(inputs, monkeypatch)
    with pytest.raises(GPUHeadersNotFoundError) as info:
        inputs.build(prefix, backend="cuda", cxx=inputs.cxx)
    message = str(info.value)
    assert "crt/host_defines.h" in message
    assert "nvidia-cuda-runtime wheel:" in message
    assert "nvidia-cuda-nvcc-cu12==12.4.*" in message
    inputs.assert_output_dir_empty()


def test_rocm_defines_and_version(inputs: Inputs) -> None:
    home = inputs.tmp / "rocm"
    (home / "include" / "hip").mkdir(parents=True)
    (home / "include" / "hip" / "hip_runtime_api.h").write_text("\n")
    (home / ".info").mkdir()
    (home / ".info" / "version").write_text("6.3.1-42\n")
    prefix = inputs.fake_torch(libs=ROCM_LIBS, cuda=None, hip="6.3")
    plan = inputs.plan(prefix, backend="rocm", gpu_home=home)
    cmd = plan.command("x")
    assert {"-DTCDE_BACKEND_ROCM", "-DUSE_ROCM", "-D__HIP_PLATFORM_AMD__"} <= set(cmd)
    assert plan.gpu_toolkit == "6.3.1"
    assert cmd[-2:] == ["-lc10_hip", "-ltorch_hip"]


def test_cache_key_tracks_sources_and_the_install(inputs: Inputs) -> None:
    prefix = inputs.fake_torch()
    key = inputs.plan(prefix).cache_key()
    assert inputs.plan(prefix).cache_key() == key
    (inputs.sources / "common.h").write_text("#pragma once\n// changed\n", encoding="utf-8")
    after_header_edit = inputs.plan(prefix).cache_key()
    assert after_header_edit != key
    other = inputs.fake_torch("2.6.1", name="other")
    assert inputs.plan(other).cache_key() != after_header_edit


@pytest.mark.parametrize(
    ("banner", "rest", "expected"),
    [
        ("g++ (Debian 12.2.0-14) 12.2.0", "Copyright 2022 Free Software Foundation", "g++ 12.2.0"),
        ("c++ (GCC) 11.4.1 20231218 (Red Hat 11.4.1-3)", "Free Software Foundation", "g++ 11.4.1"),
        ("Debian clang version 14.0.6", "Target: x86_64-pc-linux-gnu", "clang 14.0.6"),
    ],
)
def test_toolchain_identity(banner: str, rest: str, expected: str) -> None:
    assert _compile._toolchain_identity(banner, f"{banner}\n{rest}\n") == expected


def test_cli_reports_one_line_and_the_exit_code(
    inputs: Inputs, capsys: pytest.CaptureFixture[str]
) -> None:
    out = inputs.tmp / "cli-out"
    argv = ["--torch", str(inputs.fake_torch()), "--backend", "metal", "--output-dir", str(out)]
    code = _compile.main(argv)
    assert code == InvalidBackendError.exit_code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("error: InvalidBackendError: unknown backend 'metal'")
    assert not out.exists()


def test_cli_rejects_a_bad_abi_value(inputs: Inputs) -> None:
    argv = ["--torch", str(inputs.tmp), "--backend", "cpu", "--output-dir", str(inputs.tmp)]
    with pytest.raises(SystemExit) as info:
        _compile.main([*argv, "--cxx11-abi", "2"])
    assert info.value.code == 2


def test_backend_enum_is_accepted(inputs: Inputs) -> None:
    assert inputs.plan(inputs.fake_torch(), backend=Backend.CPU).backend is Backend.CPU
