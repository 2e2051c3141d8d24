"""The exported table and the build-info symbol."""

from __future__ import annotations

import ctypes
import re
import sys
from pathlib import Path

import pytest

from .dlpack_ctypes import DLPackExchangeAPI, ExchangeLibrary

torch = pytest.importorskip("torch")


def header_dlpack_version() -> tuple[int, int]:
    """DLPack version of the header a build would use (apache-tvm-ffi's dlpack.h)."""
    tvm_ffi_libinfo = pytest.importorskip(
        "tvm_ffi.libinfo", reason="apache-tvm-ffi provides the DLPack header to compare with"
    )
    include = tvm_ffi_libinfo.find_dlpack_include_path()
    text = (Path(include) / "dlpack" / "dlpack.h").read_text()
    major = re.search(r"#define DLPACK_MAJOR_VERSION (\d+)", text)
    minor = re.search(r"#define DLPACK_MINOR_VERSION (\d+)", text)
    assert major, "dlpack.h without DLPACK_MAJOR_VERSION"
    assert minor, "dlpack.h without DLPACK_MINOR_VERSION"
    return int(major.group(1)), int(minor.group(1))


def test_header_version(api: DLPackExchangeAPI, exchange_library: ExchangeLibrary) -> None:
    assert api.header.version.major == 1
    # The header version is the one of the dlpack.h the library was built with.
    built = exchange_library.build_info["dlpack"]
    assert f"{api.header.version.major}.{api.header.version.minor}" == built
    assert api.header.version.minor >= 2, "DLPackExchangeAPI needs DLPack >= 1.2"


def test_header_version_matches_installed_dlpack_header(api: DLPackExchangeAPI) -> None:
    assert (api.header.version.major, api.header.version.minor) == header_dlpack_version()


def test_prev_api_is_null(api: DLPackExchangeAPI) -> None:
    assert not api.header.prev_api


@pytest.mark.parametrize("member", ExchangeLibrary.member_names())
def test_members_are_set(api: DLPackExchangeAPI, member: str) -> None:
    pointer = ctypes.cast(getattr(api, member), ctypes.c_void_p).value
    assert pointer, f"{member} is NULL"


def test_table_is_static(exchange_library: ExchangeLibrary) -> None:
    # Consumers cache the address: every call must return the same table.
    again = exchange_library.dll.TorchDLPackExchangeAPIPtr()
    assert again == exchange_library.address
    assert exchange_library.address % ctypes.alignment(ctypes.c_void_p) == 0


def test_struct_layout_is_56_bytes() -> None:
    # DLPack 1.2 and 1.3 share this layout on 64-bit platforms.
    if ctypes.sizeof(ctypes.c_void_p) == 8:
        assert ctypes.sizeof(DLPackExchangeAPI) == 56


def test_build_info_matches_running_torch(exchange_library: ExchangeLibrary) -> None:
    info = exchange_library.build_info
    assert set(info) >= {
        "torch",
        "torch_major",
        "torch_minor",
        "backend",
        "cxx11_abi",
        "dlpack",
        "toolchain",
        "gpu_toolkit",
    }
    if exchange_library.is_portable:
        # The torch-agnostic table: one build for every torch and backend.
        assert (info["torch"], info["torch_major"], info["torch_minor"]) == ("any", None, None)
        assert (info["backend"], info["cxx11_abi"], info["gpu_toolkit"]) == ("any", None, None)
        assert info["python"] in ("abi3", "abi3.12") or info["python"].startswith("3.")
        assert info["toolchain"]
        return
    major, minor = (int(part) for part in torch.__version__.split(".")[:2])
    assert (info["torch_major"], info["torch_minor"]) == (major, minor)
    assert info["torch"].split("+")[0] == torch.__version__.split("+")[0]
    assert info["backend"] in ("cpu", "cuda", "rocm")
    assert isinstance(info["toolchain"], str)
    assert info["toolchain"]
    if sys.platform.startswith("linux") and hasattr(torch, "compiled_with_cxx11_abi"):
        assert info["cxx11_abi"] == int(torch.compiled_with_cxx11_abi())
    if info["backend"] == "cpu":
        assert info["gpu_toolkit"] is None
    else:
        assert isinstance(info["gpu_toolkit"], str)
        assert info["gpu_toolkit"]


def test_build_info_backend_fits_torch(exchange_library: ExchangeLibrary) -> None:
    backend = exchange_library.backend
    if backend == "cuda":
        assert torch.version.cuda is not None, "a CUDA library loaded into a non-CUDA torch"
    if backend == "rocm":
        assert getattr(torch.version, "hip", None) is not None
