"""Driver argument validation: each bad input gets its typed error, a message naming what
is wrong and the fix, and leaves nothing in the output directory. No compiling here (the
real compiler is only asked for ``--version``)."""

from __future__ import annotations

import dataclasses
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from _torch_c_dlpack_ext_core import driver, headers, torchchecks
from _torch_c_dlpack_ext_core.driver import (
    BuildPlan,
    BuildPolicy,
    BuildRequest,
    compile_library,
    plan_build,
)
from _torch_c_dlpack_ext_core.errors import (
    ABIMismatchError,
    BackendUnavailableError,
    BuildError,
    CompilerNotFoundError,
    DLPackHeaderNotFoundError,
    GPUHeadersNotFoundError,
    InvalidBackendError,
    TorchInstallError,
)
from _torch_c_dlpack_ext_core.headers import cuda_header_wheels
from _torch_c_dlpack_ext_core.naming import Backend
from _torch_c_dlpack_ext_core.toolchains.darwin import exported_symbols
from _torch_c_dlpack_ext_core.toolchains.unix import toolchain_identity

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
        """compile_library with a request of these inputs and ``kwargs``; a policy field
        in ``kwargs`` (``audit``, ``echo``, ...) goes to the policy."""
        options: dict[str, object] = {
            "torch": prefix or self.fake_torch(),
            "backend": "cpu",
            "output_dir": self.output_dir,
            "dlpack_include": self.dlpack_include,
            "source_dir": self.sources,
        }
        options.update(kwargs)
        policy_fields = {f.name for f in dataclasses.fields(BuildPolicy)}
        policy = {k: options.pop(k) for k in list(options) if k in policy_fields}
        compile_library(BuildRequest(**options), BuildPolicy(**policy))  # type: ignore[arg-type]

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
        return plan_build(BuildRequest(**options))  # type: ignore[arg-type]

    def assert_output_dir_empty(self) -> None:
        assert sorted(p.name for p in self.output_dir.iterdir()) == []


@pytest.fixture
def inputs(
    fake_torch: FakeTorch, dlpack_include: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Inputs:
    for var in GPU_VARS:
        monkeypatch.delenv(var, raising=False)
    # Nor this host's /usr/local/cuda: the GPU headers are each test's own.
    monkeypatch.setattr(headers, "_STANDARD_CUDA_HOMES", ())
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
    with pytest.raises(
        TorchInstallError, match=r"no torch installation.*install the torch you build for"
    ):
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


def _python_headers(root: Path, version: str, *, free_threaded: bool) -> Path:
    """A CPython ``<prefix>/include/python3.Y[t]`` with the three headers the driver reads,
    and ``<prefix>/bin/python3.Y[t]`` standing for the interpreter."""
    name = f"python{version}{'t' if free_threaded else ''}"
    include = root / "include" / name
    include.mkdir(parents=True)
    (include / "Python.h").write_text("#include <pyconfig.h>\n", encoding="utf-8")
    major, minor = version.split(".")
    (include / "patchlevel.h").write_text(
        f"#define PY_MAJOR_VERSION {major}\n#define PY_MINOR_VERSION {minor}\n", encoding="utf-8"
    )
    gil = "#define Py_GIL_DISABLED 1\n" if free_threaded else "/* #undef Py_GIL_DISABLED */\n"
    (include / "pyconfig.h").write_text(gil, encoding="utf-8")
    (root / "bin").mkdir()
    (root / "bin" / name).write_bytes(b"\x7fELF stand-in")
    return include


def test_gil_headers_make_an_abi3_library(inputs: Inputs) -> None:
    include = _python_headers(inputs.tmp / "py312", "3.12", free_threaded=False)
    plan = inputs.plan(inputs.fake_torch(), python_include=include)
    assert plan.python == "abi3"
    assert plan.limited_api
    assert "-DPy_LIMITED_API=0x03090000" in plan.command("OUT.so")
    # abi3: the running interpreter stands for every CPython >= 3.9 in the ELF audit.
    assert plan.python_exports is None


def test_free_threaded_headers_make_a_library_for_that_python_only(inputs: Inputs) -> None:
    include = _python_headers(inputs.tmp / "py314t", "3.14", free_threaded=True)
    plan = inputs.plan(inputs.fake_torch(), python_include=include, python="3.14t")
    assert plan.python == "3.14t"
    assert not plan.limited_api
    assert not [arg for arg in plan.command("OUT.so") if "Py_LIMITED_API" in arg]
    # The ELF audit checks its Python symbols against that interpreter, not this one.
    assert plan.python_exports == inputs.tmp / "py314t" / "bin" / "python3.14t"
    # One library file name serves both: the wheel's tags tell them apart.
    assert plan.filename == inputs.plan(plan.torch).filename


def test_requested_python_must_match_the_headers(inputs: Inputs) -> None:
    include = _python_headers(inputs.tmp / "py313", "3.13", free_threaded=False)
    with pytest.raises(BuildError, match=r"python='3\.13t' was requested.*make a 'abi3' library"):
        inputs.build(cxx=inputs.cxx, python_include=include, python="3.13t")
    inputs.assert_output_dir_empty()


def test_headers_older_than_the_abi3_floor(inputs: Inputs) -> None:
    include = _python_headers(inputs.tmp / "py38", "3.8", free_threaded=False)
    with pytest.raises(BuildError, match=r"CPython 3\.8; the limited API build needs CPython 3\.9"):
        inputs.build(cxx=inputs.cxx, python_include=include)
    inputs.assert_output_dir_empty()


def test_cache_key_covers_the_python_abi(inputs: Inputs) -> None:
    gil = _python_headers(inputs.tmp / "a", "3.13", free_threaded=False)
    free = _python_headers(inputs.tmp / "b", "3.13", free_threaded=True)
    torch = inputs.fake_torch()
    keys = {inputs.plan(torch, python_include=include).cache_key() for include in (gil, free)}
    assert len(keys) == 2


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
        "-DPy_LIMITED_API=0x03090000",
        '-DTCDE_TORCH_BUILD="2.6.0+cu124"',
        f'-DTCDE_TOOLCHAIN="{plan.toolchain}"',
        '-DTCDE_GPU_TOOLKIT=""',
    ]
    links = [arg for arg in cmd if arg.startswith("-l")]
    # No libtorch_python (nor libtorch): csrc/ looks its three symbols up at run time
    # (csrc/tcde_python.h), with dlopen/dlsym from -ldl on a glibc older than 2.34.
    assert links == ["-ldl", "-lc10", "-ltorch_cpu"]
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


def test_cxx20_from_torch_2_12(inputs: Inputs) -> None:
    # TorchConfig.cmake says CXX_STANDARD 20 from 2.12.0 on, 17 up to 2.11.0 (PyPI wheels).
    plan = inputs.plan(inputs.fake_torch("2.13.0+cpu", abi=True, cuda=None))
    assert "-std=c++20" in plan.command("x")
    assert "-std=c++20" in inputs.plan(inputs.fake_torch("2.12.0", name="t212")).command("x")
    assert "-std=c++17" in inputs.plan(inputs.fake_torch("2.11.0", name="t211")).command("x")
    assert "-std=c++17" in inputs.plan(inputs.fake_torch("2.9.1", name="t29")).command("x")


# --- the THPVariable layout check (sources that declare it: csrc/tcde_python.h) ---------

HEAD_2_4 = "  PyObject_HEAD;\n  // Payload\n  c10::MaybeOwned<at::Tensor> cdata;\n"
HEAD_2_10 = "  PyObject_HEAD\n  /* Payload */\n  at::Tensor cdata;\n  PyObject* hooks = nullptr;\n"


def _with_variable_header(prefix: Path, body: str | None) -> Path:
    """Give a fake torch a python_variable.h whose THPVariable has ``body``."""
    torch_dir = next(prefix.glob("lib/python3*/site-packages/torch"))
    header = torch_dir / "include" / "torch" / "csrc" / "autograd" / "python_variable.h"
    header.parent.mkdir(parents=True, exist_ok=True)
    if body is not None:
        header.write_text(f"#pragma once\nstruct THPVariable {{\n{body}}};\n", encoding="utf-8")
    return prefix


@pytest.mark.parametrize(
    ("version", "body"),
    [("2.4.1", HEAD_2_4), ("2.9.1", HEAD_2_4), ("2.10.0", HEAD_2_10), ("2.15.0", HEAD_2_10)],
)
def test_layout_check_accepts_the_checked_heads(inputs: Inputs, version: str, body: str) -> None:
    (inputs.sources / "tcde_python.h").write_text("#pragma once\n", encoding="utf-8")
    prefix = _with_variable_header(inputs.fake_torch(version, abi=True), body)
    assert inputs.plan(prefix).torch.version == version


@pytest.mark.parametrize(
    ("version", "body", "pattern"),
    [
        # a release past the checked range, even with a familiar head
        ("2.16.0", HEAD_2_10, r"torch 2\.16\.0 .* is not supported"),
        ("2.3.1", HEAD_2_4, r"torch 2\.3\.1 .* is not supported"),
        # a dev build of a checked minor whose head changed
        ("2.14.0a0+git1234", HEAD_2_4, r"declares 'PyObject_HEAD c10::MaybeOwned"),
        ("2.8.0", HEAD_2_10, r"was checked with 'PyObject_HEAD c10::MaybeOwned"),
        ("2.13.0", "  PyObject_HEAD\n  int gen;\n  at::Tensor cdata;\n", r"int gen;"),
        ("2.13.0", None, r"python_variable\.h is missing"),
    ],
)
def test_layout_check_refuses_naming_the_checked_versions(
    inputs: Inputs, version: str, body: str | None, pattern: str
) -> None:
    (inputs.sources / "tcde_python.h").write_text("#pragma once\n", encoding="utf-8")
    prefix = _with_variable_header(inputs.fake_torch(version, abi=True), body)
    with pytest.raises(TorchInstallError, match=pattern) as info:
        inputs.build(prefix, cxx=inputs.cxx)
    assert "checked for torch 2.4-2.9, 2.10-2.15" in str(info.value)
    assert "extend csrc/tcde_python.h" in str(info.value)
    inputs.assert_output_dir_empty()


def test_layout_check_only_for_sources_that_declare_the_layout(inputs: Inputs) -> None:
    prefix = inputs.fake_torch("2.16.0", abi=True)  # no python_variable.h at all
    assert inputs.plan(prefix).torch.minor == 16
    with pytest.raises(TorchInstallError, match="not supported"):
        driver.check_tensor_layout(inputs.plan(prefix).torch)


def test_the_real_header_declares_the_checked_heads() -> None:
    """csrc/tcde_python.h and the driver's table name the same ranges."""
    header = (Path(__file__).resolve().parents[2] / "csrc" / "tcde_python.h").read_text()
    assert "TCDE_TORCH_AT_LEAST(2, 16)" in header
    assert "!TCDE_TORCH_AT_LEAST(2, 4)" in header
    assert "#elif TCDE_TORCH_AT_LEAST(2, 10)" in header
    ranges = [(lo, hi) for lo, hi, _ in torchchecks.THPVARIABLE_HEADS]
    assert ranges == [((2, 4), (2, 9)), ((2, 10), (2, 15))]


@pytest.mark.parametrize(
    ("cuda", "wheels"),
    [
        ("12.8", "nvidia-cuda-runtime-cu12==12.8.* nvidia-cuda-nvcc-cu12==12.8.*"),
        ("13.0", "nvidia-cuda-runtime==13.0.* nvidia-cuda-crt==13.0.*"),
        ("13.2", "nvidia-cuda-runtime==13.2.* nvidia-cuda-crt==13.2.*"),
        (None, "nvidia-cuda-runtime-cu12 nvidia-cuda-nvcc-cu12"),
    ],
)
def test_cuda_header_wheels_per_cuda_major(cuda: str | None, wheels: str) -> None:
    assert cuda_header_wheels(cuda) == wheels


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
    # Linux: no libtorch_cuda (csrc/ allocates GPU memory through at::empty).
    assert cmd[-3:] == ["-lc10", "-ltorch_cpu", "-lc10_cuda"]


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


def test_cuda13_headers_from_the_cu13_wheel_tree(
    inputs: Inputs, monkeypatch: pytest.MonkeyPatch
) -> None:
    # nvidia-cuda-runtime and nvidia-cuda-crt 13.x both install into nvidia/cu13/include.
    prefix = inputs.fake_torch("2.11.0+cu130", abi=True, cuda="13.0", libs=CUDA_LIBS)
    site = prefix / "lib" / "python3.11" / "site-packages"
    include = site / "nvidia" / "cu13" / "include"
    (include / "crt").mkdir(parents=True)
    (include / "cuda_runtime_api.h").write_text("#define CUDART_VERSION 13000\n")
    no_nvcc = inputs.tmp / "bin"
    no_nvcc.mkdir()
    monkeypatch.setenv("PATH", str(no_nvcc))
    with pytest.raises(GPUHeadersNotFoundError) as info:
        inputs.plan(prefix, backend="cuda")
    assert "nvidia-cuda-runtime==13.0.* nvidia-cuda-crt==13.0.*" in str(info.value)
    assert str(site / "nvidia" / "cu13" / "include") in str(info.value)
    (include / "crt" / "host_defines.h").write_text("\n")
    plan = inputs.plan(prefix, backend="cuda")
    assert plan.gpu_includes == (include.resolve(),)
    assert plan.gpu_toolkit == "13.0"


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
    # Linux: no libtorch_hip, as no libtorch_cuda for CUDA.
    assert cmd[-3:] == ["-lc10", "-ltorch_cpu", "-lc10_hip"]


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
    assert toolchain_identity(banner, f"{banner}\n{rest}\n") == expected


def test_cli_reports_one_line_and_the_exit_code(
    inputs: Inputs, capsys: pytest.CaptureFixture[str]
) -> None:
    out = inputs.tmp / "cli-out"
    argv = ["--torch", str(inputs.fake_torch()), "--backend", "metal", "--output-dir", str(out)]
    code = driver.main(argv)
    assert code == InvalidBackendError.exit_code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("error: InvalidBackendError: unknown backend 'metal'")
    assert not out.exists()


def test_cli_rejects_a_bad_abi_value(inputs: Inputs) -> None:
    argv = ["--torch", str(inputs.tmp), "--backend", "cpu", "--output-dir", str(inputs.tmp)]
    with pytest.raises(SystemExit) as info:
        driver.main([*argv, "--cxx11-abi", "2"])
    assert info.value.code == 2


def test_backend_enum_is_accepted(inputs: Inputs) -> None:
    assert inputs.plan(inputs.fake_torch(), backend=Backend.CPU).backend is Backend.CPU


# --- Windows (MSVC) and macOS (clang): command construction on a faked platform. ---------

MSVC_BANNER = "Microsoft (R) C/C++ Optimizing Compiler Version 19.38.33130 for x64"
WINDOWS_LIBS = (
    "c10.dll",
    "c10.lib",
    "torch_cpu.dll",
    "torch_cpu.lib",
    "torch.lib",
    "torch_python.lib",
)
WINDOWS_CUDA_LIBS = (*WINDOWS_LIBS, "c10_cuda.dll", "c10_cuda.lib", "torch_cuda.lib")
MACOS_LIBS = ("libc10.dylib", "libtorch_cpu.dylib", "libtorch.dylib", "libtorch_python.dylib")
# Stands in for cl.exe: the banner on stderr when run bare (as cl does); with arguments it
# writes what the real compiler and linker write (the DLL at /Fe, the import library and
# .exp at /IMPLIB:) and records its argv, so the driver's handling of them is observable.
FAKE_CL = r"""#!/bin/sh
if [ $# -eq 0 ]; then
  echo "usage: cl [ option... ] filename... [ /link linkoption... ]"
  echo "@BANNER@" >&2
  exit 2
fi
printf '%s\n' "$@" > "@ARGV@"
for a in "$@"; do
  case "$a" in
    /Fe*) out="${a#/Fe}" ;;
    /IMPLIB:*)
      # Backslashes to slashes with shell builtins only: the test's PATH has no tr/sed.
      raw="${a#/IMPLIB:}"; lib=""
      while :; do
        case "$raw" in
          *\\*) lib="$lib${raw%%\\*}/"; raw="${raw#*\\}" ;;
          *) lib="$lib$raw"; break ;;
        esac
      done ;;
  esac
done
if [ -z "${out:-}" ] || [ -z "${lib:-}" ]; then
  echo "fake cl: the driver passed no /Fe or no /IMPLIB" >&2
  exit 1
fi
printf 'MZ fake dll' > "$out"
printf 'import lib' > "$lib"
printf 'exports' > "${lib%.lib}.exp"
"""


def windows_torch(
    root: Path, version: str = "2.8.0+cpu", libs: tuple[str, ...] = WINDOWS_LIBS
) -> Path:
    """A Windows venv as pip lays it out: ``Lib/site-packages/torch``, import libraries in lib/."""
    torch_dir = root / "Lib" / "site-packages" / "torch"
    (torch_dir / "include" / "torch" / "csrc" / "api" / "include").mkdir(parents=True)
    (torch_dir / "lib").mkdir()
    (torch_dir / "version.py").write_text(
        f"__version__ = {version!r}\ncuda = None\nhip = None\n", encoding="utf-8"
    )
    for lib in libs:
        (torch_dir / "lib" / lib).write_bytes(b"MZ fake " + lib.encode())
    return root


@dataclasses.dataclass
class Windows:
    """A faked Windows build: a fake cl.exe on PATH, a Python with libs/python311.lib."""

    inputs: Inputs
    cl: Path
    argv_file: Path
    python_lib: Path

    def plan(self, prefix: Path, **kwargs: object) -> BuildPlan:
        options: dict[str, object] = {
            "platform": "win32",
            "python_lib": self.python_lib,
            "cxx": None,
        }
        options.update(kwargs)
        return self.inputs.plan(prefix, **options)


@pytest.fixture
def windows(inputs: Inputs, monkeypatch: pytest.MonkeyPatch) -> Windows:
    bin_dir = inputs.tmp / "msvc-bin"
    bin_dir.mkdir()
    argv_file = inputs.tmp / "cl-argv.txt"
    cl = bin_dir / "cl.exe"
    cl.write_text(
        FAKE_CL.replace("@BANNER@", MSVC_BANNER).replace("@ARGV@", str(argv_file)),
        encoding="utf-8",
    )
    cl.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    python_lib = inputs.tmp / "Python311" / "libs" / "python311.lib"
    python_lib.parent.mkdir(parents=True)
    python_lib.write_bytes(b"import library")
    return Windows(inputs, cl, argv_file, python_lib)


def test_windows_command_follows_the_build_contract(windows: Windows) -> None:
    inputs = windows.inputs
    plan = windows.plan(windows_torch(inputs.tmp / "win"))
    torch = plan.torch
    assert plan.cxx11_abi is None
    assert plan.cxx == str(windows.cl)
    assert plan.toolchain == "msvc 19.38.33130"
    assert plan.filename == "torch_c_dlpack_ext-torch2.8-cpu.dll"
    assert plan.command("OUT.dll", "SCRATCH") == [
        str(windows.cl),
        "/nologo",
        "/O2",
        "/LD",
        "/MD",
        "/EHsc",
        "/permissive-",
        "/std:c++17",
        "/Zc:__cplusplus",
        "/DTCDE_BACKEND_CPU",
        "/DPy_LIMITED_API=0x03090000",
        '/DTCDE_TORCH_BUILD="2.8.0+cpu"',
        '/DTCDE_TOOLCHAIN="msvc 19.38.33130"',
        '/DTCDE_GPU_TOOLKIT=""',
        f"/I{inputs.dlpack_include.resolve()}",
        f"/I{torch.root / 'include'}",
        f"/I{torch.root / 'include' / 'torch' / 'csrc' / 'api' / 'include'}",
        f"/I{plan.python_include}",
        str(inputs.sources / "a.cc"),
        str(inputs.sources / "b.cc"),
        "/FoSCRATCH\\",
        "/FeOUT.dll",
        "/link",
        f"/LIBPATH:{torch.lib_dir}",
        "c10.lib",
        "torch_cpu.lib",
        "torch.lib",
        "torch_python.lib",
        f"/LIBPATH:{windows.python_lib.parent.resolve()}",
        "python311.lib",
        "/IMPLIB:SCRATCH\\torch_c_dlpack_ext-torch2.8-cpu.lib",
    ]


def test_windows_cuda_and_cxx20(windows: Windows) -> None:
    home = windows.inputs.tmp / "cuda"
    (home / "include" / "crt").mkdir(parents=True)
    (home / "include" / "cuda_runtime_api.h").write_text("#define CUDART_VERSION 12060\n")
    (home / "include" / "crt" / "host_defines.h").write_text("\n")
    prefix = windows_torch(windows.inputs.tmp / "win", "2.13.0+cu126", WINDOWS_CUDA_LIBS)
    plan = windows.plan(prefix, backend="cuda", gpu_home=home)
    cmd = plan.command("OUT.dll", "S")
    assert "/std:c++20" in cmd
    assert "/DTCDE_BACKEND_CUDA" in cmd
    assert f"/I{(home / 'include').resolve()}" in cmd
    link = cmd[cmd.index("/link") + 1 :]
    assert link[1:7] == [
        "c10.lib",
        "torch_cpu.lib",
        "torch.lib",
        "torch_python.lib",
        "c10_cuda.lib",
        "torch_cuda.lib",
    ]
    assert plan.filename == "torch_c_dlpack_ext-torch2.13-cuda.dll"


def test_windows_without_cl_names_the_fix(
    windows: Windows, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = windows.inputs.tmp / "no-msvc"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(CompilerNotFoundError) as info:
        windows.plan(windows_torch(windows.inputs.tmp / "win"))
    message = str(info.value)
    assert "cl.exe is not on PATH" in message
    assert "x64 Native Tools Command Prompt" in message
    assert "Visual Studio Build Tools" in message


def test_windows_rejects_a_gcc_style_cxx(windows: Windows) -> None:
    with pytest.raises(CompilerNotFoundError, match=r"is not MSVC's cl\.exe.*set it to cl\.exe"):
        windows.plan(windows_torch(windows.inputs.tmp / "win"), cxx=windows.inputs.cxx)


def test_windows_cl_without_a_banner(windows: Windows) -> None:
    windows.cl.write_text("#!/bin/sh\necho hello\n", encoding="utf-8")
    with pytest.raises(CompilerNotFoundError, match=r"printed no MSVC banner"):
        windows.plan(windows_torch(windows.inputs.tmp / "win"))


def test_windows_abi3_links_the_stable_abi_import_library(
    windows: Windows, monkeypatch: pytest.MonkeyPatch
) -> None:
    # python3.lib names python3.dll, which every CPython >= 3.9 ships: python311.lib would
    # tie the DLL to one Python.
    base = windows.inputs.tmp / "Python311"
    (base / "libs" / "python3.lib").write_bytes(b"import library")
    monkeypatch.setattr(driver.sys, "base_prefix", str(base))
    import sysconfig

    real = sysconfig.get_config_var
    monkeypatch.setattr(
        sysconfig, "get_config_var", lambda name: None if name == "installed_base" else real(name)
    )
    plan = windows.plan(windows_torch(windows.inputs.tmp / "win"), python_lib=None)
    assert plan.python == "abi3"
    assert plan.python_import_lib == (base / "libs" / "python3.lib").resolve()
    assert "python3.lib" in plan.command("OUT.dll", "S")


def test_windows_needs_the_python_import_library(windows: Windows) -> None:
    missing = windows.inputs.tmp / "nowhere" / "python311.lib"
    with pytest.raises(BuildError, match=r"no Python import library .*python311\.lib"):
        windows.plan(windows_torch(windows.inputs.tmp / "win"), python_lib=missing)
    windows.inputs.assert_output_dir_empty()


def test_windows_torch_without_import_libraries(windows: Windows) -> None:
    prefix = windows_torch(windows.inputs.tmp / "win", libs=("c10.dll", "torch_cpu.dll"))
    with pytest.raises(TorchInstallError) as info:
        windows.plan(prefix)
    assert "lacks c10.lib, torch_cpu.lib, torch.lib, torch_python.lib" in str(info.value)
    assert "reinstall torch" in str(info.value)


def test_windows_build_keeps_msvc_by_products_out_of_output_dir(windows: Windows) -> None:
    plan = windows.plan(windows_torch(windows.inputs.tmp / "win"))
    entry = driver._build(plan, plan.cache_key(), BuildPolicy(audit=True, stable_abi_audit=False))
    assert entry.file == plan.filename
    assert entry.cxx11_abi is None
    assert sorted(p.name for p in plan.output_dir.iterdir()) == [
        plan.filename,
        f"{plan.filename}.build.json",
    ]
    argv = windows.argv_file.read_text(encoding="utf-8").splitlines()
    scratch = Path(next(a for a in argv if a.startswith("/Fo"))[3:].rstrip("\\"))
    assert scratch.parent != plan.output_dir
    assert not scratch.exists(), "the scratch dir (objects, .lib, .exp) must be removed"


def test_macos_command_follows_the_build_contract(inputs: Inputs) -> None:
    (inputs.sources / "exports.map").write_text(
        "/* a */ { global: TorchDLPackExchangeAPIPtr; TorchCDLPackExtBuildInfo; local: *; };\n",
        encoding="utf-8",
    )
    prefix = inputs.fake_torch("2.8.0", abi=None, cuda=None, libs=MACOS_LIBS)
    plan = inputs.plan(prefix, platform="darwin")
    torch = plan.torch
    assert plan.cxx11_abi is None
    assert plan.filename == "libtorch_c_dlpack_ext-torch2.8-cpu.dylib"
    assert plan.command("OUT.dylib", "SCRATCH") == [
        inputs.cxx,
        "-O2",
        "-fPIC",
        "-shared",
        "-fvisibility=hidden",
        "-fvisibility-inlines-hidden",
        "-undefined",
        "dynamic_lookup",
        "-std=c++17",
        "-DTCDE_BACKEND_CPU",
        "-DPy_LIMITED_API=0x03090000",
        '-DTCDE_TORCH_BUILD="2.8.0"',
        f'-DTCDE_TOOLCHAIN="{plan.toolchain}"',
        '-DTCDE_GPU_TOOLKIT=""',
        f"-I{inputs.dlpack_include.resolve()}",
        f"-I{torch.root / 'include'}",
        f"-I{torch.root / 'include' / 'torch' / 'csrc' / 'api' / 'include'}",
        f"-I{plan.python_include}",
        # Headers relative to their include directory, sources as csrc/ (a directory
        # inside another last).
        f"-fmacro-prefix-map={inputs.dlpack_include.resolve()}/=",
        f"-fmacro-prefix-map={torch.root / 'include'}/=",
        f"-fmacro-prefix-map={plan.python_include}/=",
        f"-fmacro-prefix-map={inputs.sources}/={inputs.sources.name}/",
        f"-fmacro-prefix-map={torch.root / 'include' / 'torch' / 'csrc' / 'api' / 'include'}/=",
        str(inputs.sources / "a.cc"),
        str(inputs.sources / "b.cc"),
        "-o",
        "OUT.dylib",
        "-Wl,-exported_symbols_list,SCRATCH/exports.darwin.txt",
        "-Wl,-x",
        "-Wl,-install_name,@rpath/libtorch_c_dlpack_ext-torch2.8-cpu.dylib",
        f"-L{torch.lib_dir}",
        "-lc10",
        "-ltorch_cpu",
        "-ltorch",
        "-ltorch_python",
    ]


def test_macos_torch_without_dylibs(inputs: Inputs) -> None:
    prefix = inputs.fake_torch("2.8.0", abi=None, cuda=None)  # Linux .so files only
    with pytest.raises(TorchInstallError, match=r"lacks libc10\.dylib, libtorch_cpu\.dylib"):
        inputs.plan(prefix, platform="darwin")


def test_macos_build_writes_the_export_list(inputs: Inputs) -> None:
    (inputs.sources / "exports.map").write_text(
        "{ global: Foo; Bar; local: *; };\n", encoding="utf-8"
    )
    seen = inputs.tmp / "exports-seen.txt"
    clang = inputs.tmp / "clang++"
    # Stands in for clang: copies the export list it was given and writes the output.
    clang.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = --version ]; then echo "Apple clang version 16.0.0"; exit 0; fi\n'
        'for a in "$@"; do case "$a" in -Wl,-exported_symbols_list,*) '
        f'cp "${{a#-Wl,-exported_symbols_list,}}" "{seen}";; esac; done\n'
        'while [ "$1" != -o ]; do shift; done; printf dylib > "$2"\n',
        encoding="utf-8",
    )
    clang.chmod(0o755)
    prefix = inputs.fake_torch("2.8.0", abi=None, cuda=None, libs=MACOS_LIBS)
    plan = inputs.plan(prefix, platform="darwin", cxx=str(clang))
    assert plan.toolchain == "clang 16.0.0"
    entry = driver._build(plan, plan.cache_key(), BuildPolicy(audit=True, stable_abi_audit=False))
    assert entry.file == plan.filename
    # Mach-O names C symbols with a leading underscore.
    assert seen.read_text(encoding="utf-8") == "_Foo\n_Bar\n"
    assert sorted(p.name for p in plan.output_dir.iterdir()) == [
        plan.filename,
        f"{plan.filename}.build.json",
    ]


def test_exports_map_names_exactly_the_exported_functions() -> None:
    # One list for both linkers: exports.map feeds GNU ld and (generated) ld64.
    csrc = Path(__file__).resolve().parents[2] / "csrc"
    header = (csrc / "tcde_dlpack.h").read_text(encoding="utf-8")
    declared = re.findall(r"^TCDE_EXPORT\s+[^;(]*?\b(\w+)\s*\(", header, re.M)
    assert declared, "tcde_dlpack.h declares its exports with TCDE_EXPORT"
    assert sorted(exported_symbols(csrc)) == sorted(declared)


def test_exports_map_without_globals_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "exports.map").write_text("{ local: *; };\n", encoding="utf-8")
    with pytest.raises(BuildError, match=r"names no symbol under 'global:'"):
        exported_symbols(tmp_path)


def test_windows_toolchain_from_a_localized_banner(windows: Windows) -> None:
    banner = "Microsoft(R) C/C++ Optimizing Compiler バージョン 19.40.33811 (x64)"
    windows.cl.write_text(f"#!/bin/sh\necho '{banner}' >&2\nexit 2\n", encoding="utf-8")
    plan = windows.plan(windows_torch(windows.inputs.tmp / "win"))
    assert plan.toolchain == "msvc 19.40.33811"
    assert plan.compiler_banner == banner


# --- a failed tool run is a BuildError carrying its command and output -------------------

FAKE_GXX = """#!/bin/sh
if [ "$1" = --version ]; then echo "g++ (GCC) 12.2.0"; echo "Free Software Foundation"; exit 0; fi
while [ "$1" != -o ]; do shift; done; printf 'ELF' > "$2"
"""


def _published(inputs: Inputs) -> list[str]:
    """What a failed build left in the output dir besides its lock file (must be nothing)."""
    return sorted(p.name for p in inputs.output_dir.iterdir() if p.suffix != ".lock")


def _fake_gnu_tools(inputs: Inputs, monkeypatch: pytest.MonkeyPatch, nm_exit: int) -> Path:
    """A fake g++ that writes its output and an ``nm`` that exits ``nm_exit``, alone on PATH."""
    bin_dir = inputs.tmp / "fake-bin"
    bin_dir.mkdir()
    gxx = bin_dir / "g++"
    gxx.write_text(FAKE_GXX, encoding="utf-8")
    nm = bin_dir / "nm"
    nm.write_text(
        f"#!/bin/sh\necho 'nm: {inputs.tmp}: file format not recognized' >&2\nexit {nm_exit}\n"
    )
    for tool in (gxx, nm):
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    return gxx


@linux_only
def test_a_failing_nm_in_the_audit_is_a_build_error(
    inputs: Inputs, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    gxx = _fake_gnu_tools(inputs, monkeypatch, nm_exit=1)
    with pytest.raises(BuildError) as info:
        inputs.build(cxx=str(gxx))
    assert type(info.value) is BuildError
    assert "could not read dynamic symbols" in str(info.value)
    assert Path(info.value.command[0]).name == "nm"
    assert "file format not recognized" in info.value.output
    assert _published(inputs) == []
    # The CLI reports it in one line with the build's exit code (never CommandError's).
    argv = ["--torch", str(inputs.fake_torch(name="cli")), "--backend", "cpu"]
    argv += ["--output-dir", str(inputs.output_dir), "--cxx", str(gxx)]
    argv += ["--dlpack-include", str(inputs.dlpack_include), "--source-dir", str(inputs.sources)]
    capsys.readouterr()
    assert driver.main(argv) == BuildError.exit_code == 5
    lines = capsys.readouterr().err.strip().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("error: "))
    assert lines[start].startswith("error: BuildError: the ABI audit of ")
    # ... followed by what nm said (issue 21: not only the first line).
    assert lines[start + 1].strip().endswith("file format not recognized")


@linux_only
def test_no_command_error_escapes_compile_library(
    inputs: Inputs, monkeypatch: pytest.MonkeyPatch
) -> None:
    from _torch_c_dlpack_ext_core.errors import CommandError
    from _torch_c_dlpack_ext_core.toolchains import toolchain_for

    def failing_audit(*args: object, **kwargs: object) -> object:
        raise CommandError(["some-tool", "arg"], 3, "", "it broke")

    gxx = _fake_gnu_tools(inputs, monkeypatch, nm_exit=0)
    monkeypatch.setattr(type(toolchain_for(sys.platform)), "audit", failing_audit)
    with pytest.raises(BuildError) as info:
        inputs.build(cxx=str(gxx))
    assert not isinstance(info.value, CommandError)
    assert info.value.command == ["some-tool", "arg"]
    assert info.value.output == "it broke"
    assert _published(inputs) == []
