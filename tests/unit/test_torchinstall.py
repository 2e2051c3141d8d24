"""TorchInstall: a torch installation read from its files (fake trees, no torch import)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from _torch_c_dlpack_ext_core.errors import TorchInstallError
from _torch_c_dlpack_ext_core.naming import Backend
from _torch_c_dlpack_ext_core.toolchains import toolchain_for
from _torch_c_dlpack_ext_core.torchinstall import TorchInstall

FakeTorch = Callable[..., Path]


def _torch_dir(prefix: Path) -> Path:
    return prefix / "lib" / "python3.11" / "site-packages" / "torch"


@pytest.mark.parametrize("form", ["prefix", "site-packages", "package"])
def test_accepts_prefix_site_packages_and_package_dir(fake_torch: FakeTorch, form: str) -> None:
    prefix = fake_torch()
    given = {
        "prefix": prefix,
        "site-packages": _torch_dir(prefix).parent,
        "package": _torch_dir(prefix),
    }[form]
    install = TorchInstall.from_path(given, platform="linux")
    assert install.root == _torch_dir(prefix).resolve()
    assert install.site_packages == _torch_dir(prefix).parent.resolve()


def test_reads_version_module_without_running_it(fake_torch: FakeTorch) -> None:
    # The fake version.py calls os._exit(3): reaching the asserts proves it was parsed, not run.
    install = TorchInstall.from_path(fake_torch("2.6.0+cu124", cuda="12.4"), platform="linux")
    assert (install.version, install.major, install.minor) == ("2.6.0+cu124", 2, 6)
    assert install.cuda_version == "12.4"
    assert install.hip_version is None
    assert install.include_dirs == (
        install.root / "include",
        install.root / "include" / "torch" / "csrc" / "api" / "include",
    )
    assert install.lib_dir == install.root / "lib"


def test_reads_hip_version(fake_torch: FakeTorch) -> None:
    install = TorchInstall.from_path(
        fake_torch("2.8.0+rocm6.3", cuda=None, hip="6.3.42131"), platform="linux"
    )
    assert install.cuda_version is None
    assert install.hip_version == "6.3.42131"


@pytest.mark.parametrize("abi", [False, True])
@pytest.mark.parametrize("cmake_file", ["Torch/TorchConfig.cmake", "Caffe2/Caffe2Config.cmake"])
def test_abi_from_cmake_config(fake_torch: FakeTorch, abi: bool, cmake_file: str) -> None:
    install = TorchInstall.from_path(fake_torch(abi=abi, cmake_file=cmake_file), platform="linux")
    assert install.cxx11_abi is abi


@pytest.mark.parametrize("platform", ["darwin", "win32"])
def test_no_abi_off_linux(fake_torch: FakeTorch, platform: str) -> None:
    install = TorchInstall.from_path(fake_torch(abi=False), platform=platform)
    assert install.cxx11_abi is None


def test_silent_cmake_and_unreadable_libc10_is_an_error(fake_torch: FakeTorch) -> None:
    # The fake libc10.so is not an ELF file: nm fails, which must surface as a torch problem.
    with pytest.raises(TorchInstallError, match=r"cannot read the dynamic symbols of .*libc10"):
        TorchInstall.from_path(fake_torch(abi=None), platform="linux")


def test_silent_cmake_and_no_libc10_is_an_error(fake_torch: FakeTorch) -> None:
    prefix = fake_torch(abi=None, libs=("libtorch_cpu.so",))
    with pytest.raises(TorchInstallError, match=r"cannot tell the C\+\+ ABI.*libc10\.so"):
        TorchInstall.from_path(prefix, platform="linux")


@pytest.mark.parametrize(
    ("libs", "expected"),
    [
        (("libc10.so", "libtorch_cpu.so"), {Backend.CPU}),
        (("libc10.so", "libc10_cuda.so", "libtorch_cuda.so"), {Backend.CPU, Backend.CUDA}),
        (("libc10.so", "libc10_hip.so", "libtorch_hip.so"), {Backend.CPU, Backend.ROCM}),
    ],
)
def test_backends_from_libraries_present(
    fake_torch: FakeTorch, libs: tuple[str, ...], expected: set[Backend]
) -> None:
    install = TorchInstall.from_path(fake_torch(libs=libs), platform="linux")
    assert install.backends_available == expected


def test_no_torch_names_what_was_looked_for_and_the_fix(tmp_path: Path) -> None:
    with pytest.raises(TorchInstallError) as info:
        TorchInstall.from_path(tmp_path)
    message = str(info.value)
    assert str(tmp_path) in message
    assert "version.py and the C++ headers" in message
    assert "install the torch you build for there" in message


def test_version_module_without_version(fake_torch: FakeTorch) -> None:
    prefix = fake_torch()
    (_torch_dir(prefix) / "version.py").write_text("debug = False\n", encoding="utf-8")
    with pytest.raises(TorchInstallError, match="no __version__"):
        TorchInstall.from_path(prefix, platform="linux")


def test_broken_version_module(fake_torch: FakeTorch) -> None:
    prefix = fake_torch()
    (_torch_dir(prefix) / "version.py").write_text("__version__ = (\n", encoding="utf-8")
    with pytest.raises(TorchInstallError, match="looks damaged"):
        TorchInstall.from_path(prefix, platform="linux")


def test_identity_changes_when_libtorch_cpu_changes(fake_torch: FakeTorch) -> None:
    prefix = fake_torch()
    before = TorchInstall.from_path(prefix, platform="linux").identity
    lib = _torch_dir(prefix) / "lib" / "libtorch_cpu.so"
    lib.write_bytes(lib.read_bytes() + b"rebuilt")
    stat = lib.stat()
    os.utime(lib, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    after = TorchInstall.from_path(prefix, platform="linux").identity
    assert before != after
    assert before["version"] == after["version"]


def _windows_venv(root: Path, libs: tuple[str, ...]) -> Path:
    """``<venv>/Lib/site-packages/torch`` with DLLs and their import libraries in lib/."""
    torch_dir = root / "Lib" / "site-packages" / "torch"
    (torch_dir / "include").mkdir(parents=True)
    (torch_dir / "lib").mkdir()
    (torch_dir / "version.py").write_text(
        "__version__ = '2.6.0+cu124'\ncuda = '12.4'\nhip = None\n", encoding="utf-8"
    )
    for lib in libs:
        (torch_dir / "lib" / lib).write_bytes(b"MZ")
    return root


@pytest.mark.parametrize(
    ("libs", "expected"),
    [
        (("c10.dll", "c10.lib", "torch_cpu.dll", "torch_cpu.lib"), {Backend.CPU}),
        (("c10.dll", "c10.lib", "c10_cuda.dll"), {Backend.CPU, Backend.CUDA}),
        (("c10.lib", "c10_cuda.lib"), {Backend.CPU, Backend.CUDA}),
    ],
)
def test_windows_layout(tmp_path: Path, libs: tuple[str, ...], expected: set[Backend]) -> None:
    prefix = _windows_venv(tmp_path / "venv", libs)
    install = TorchInstall.from_path(prefix, platform="win32")
    assert install.root == (prefix / "Lib" / "site-packages" / "torch").resolve()
    assert install.cxx11_abi is None
    assert install.backends_available == expected
    assert (install.major, install.minor, install.cuda_version) == (2, 6, "12.4")


def test_windows_import_libraries_are_what_the_link_needs(tmp_path: Path) -> None:
    # The DLLs alone cannot be linked against: MSVC reads the .lib import libraries.
    install = TorchInstall.from_path(
        _windows_venv(tmp_path / "venv", ("c10.dll", "c10.lib", "torch_cpu.dll")),
        platform="win32",
    )
    msvc = toolchain_for("win32")
    assert msvc.missing_link_libraries(install.lib_dir, ("c10", "torch_cpu")) == ["torch_cpu.lib"]


def test_macos_layout(fake_torch: FakeTorch) -> None:
    libs = ("libc10.dylib", "libtorch_cpu.dylib", "libtorch.dylib", "libtorch_python.dylib")
    install = TorchInstall.from_path(fake_torch("2.8.0", abi=None, libs=libs), platform="darwin")
    assert install.cxx11_abi is None
    assert install.backends_available == {Backend.CPU}
    darwin = toolchain_for("darwin")
    stems = ("c10", "torch_cpu", "torch", "torch_python")
    assert darwin.missing_link_libraries(install.lib_dir, stems) == []
    assert darwin.missing_link_libraries(install.lib_dir, ("c10_cuda",)) == ["libc10_cuda.dylib"]


@pytest.mark.parametrize(
    ("platform", "expected"),
    [("win32", "c10.lib"), ("darwin", "libc10.dylib"), ("linux", "libc10.so")],
)
def test_link_library_name(platform: str, expected: str) -> None:
    assert toolchain_for(platform).link_library_name("c10") == expected
