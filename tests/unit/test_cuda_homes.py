"""Where the CUDA headers are looked for (``headers._cuda_homes``): every candidate is
tried until one has them, ``/usr/local/cuda`` and Windows' ``CUDA_PATH_V*`` included, and
the error lists every place tried. Fake toolkits in tmp_path; PATH and the environment
are the test's own."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from _torch_c_dlpack_ext_core import headers
from _torch_c_dlpack_ext_core.errors import GPUHeadersNotFoundError
from _torch_c_dlpack_ext_core.naming import Backend
from _torch_c_dlpack_ext_core.torchinstall import TorchInstall


def _toolkit(home: Path, version: int = 12080) -> Path:
    include = home / "include"
    (include / "crt").mkdir(parents=True)
    (include / "cuda_runtime_api.h").write_text(f"#define CUDART_VERSION {version}\n")
    (include / "crt" / "host_defines.h").write_text("\n")
    (home / "bin").mkdir()
    (home / "bin" / "nvcc").write_text("#!/bin/sh\n")
    (home / "bin" / "nvcc").chmod(0o755)
    return include.resolve()


def _torch(tmp_path: Path, cuda: str = "12.8") -> TorchInstall:
    root = tmp_path / "site-packages" / "torch"
    root.mkdir(parents=True)
    return TorchInstall(
        root=root, version=f"2.8.0+cu{cuda.replace('.', '')}", major=2, minor=8,
        cxx11_abi=True, cuda_version=cuda, hip_version=None, include_dirs=(),
        lib_dir=root / "lib", backends_available=frozenset({Backend.CPU, Backend.CUDA}),
    )  # fmt: skip


@pytest.fixture
def standard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The standard location, a fake /usr/local/cuda; no header wheels of this env."""
    home = tmp_path / "usr" / "local" / "cuda"
    monkeypatch.setattr(headers, "_STANDARD_CUDA_HOMES", (home,), raising=False)
    monkeypatch.setattr(headers, "_site_packages_dirs", lambda torch: [torch.site_packages])
    return home


def _wrapper(directory: Path, real: Path) -> str:
    """An ``nvcc`` that is a script exec'ing the real one, as /usr/local/bin/nvcc here."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "nvcc"
    script.write_text(f'#!/bin/sh\nexec "{real}" "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(directory)


def test_an_nvcc_wrapper_outside_the_toolkit_falls_through_to_usr_local_cuda(
    tmp_path: Path, standard: Path
) -> None:
    include = _toolkit(standard)
    path = _wrapper(tmp_path / "usr" / "local" / "bin", standard / "bin" / "nvcc")
    found, version = headers.find_gpu_toolkit(
        Backend.CUDA, _torch(tmp_path), environ={"PATH": path}
    )
    assert found == (include,)
    assert version == "12.8"


def test_a_cuda_home_without_headers_does_not_stop_the_search(
    tmp_path: Path, standard: Path
) -> None:
    include = _toolkit(standard)
    empty = tmp_path / "empty-home"
    empty.mkdir()
    found, _ = headers.find_gpu_toolkit(
        Backend.CUDA, _torch(tmp_path), environ={"CUDA_HOME": str(empty), "PATH": ""}
    )
    assert found == (include,)


def test_complete_header_wheels_come_before_usr_local_cuda(tmp_path: Path, standard: Path) -> None:
    _toolkit(standard, 13000)  # another major than torch's, as on this machine
    torch = _torch(tmp_path, "12.8")
    wheels = _toolkit(torch.site_packages / "nvidia" / "cu12", 12080)
    found, version = headers.find_gpu_toolkit(Backend.CUDA, torch, environ={"PATH": ""})
    assert (found, version) == ((wheels,), "12.8")


def test_versioned_cuda_paths_prefer_torchs_major_then_the_newest(
    tmp_path: Path, standard: Path
) -> None:
    v11 = _toolkit(tmp_path / "v11.8", 11080)
    v124 = _toolkit(tmp_path / "v12.4", 12040)
    v126 = _toolkit(tmp_path / "v12.6", 12060)
    v130 = _toolkit(tmp_path / "v13.0", 13000)
    environ = {
        "CUDA_PATH_V11_8": str(tmp_path / "v11.8"),
        "CUDA_PATH_V12_4": str(tmp_path / "v12.4"),
        "CUDA_PATH_V12_6": str(tmp_path / "v12.6"),
        "CUDA_PATH_V13_0": str(tmp_path / "v13.0"),
        "PATH": "",
    }
    assert headers.find_gpu_toolkit(Backend.CUDA, _torch(tmp_path, "12.8"), environ=environ)[0] == (
        v126,
    )
    other = tmp_path / "other"
    other.mkdir()
    assert headers.find_gpu_toolkit(Backend.CUDA, _torch(other, "13.0"), environ=environ)[0] == (
        v130,
    )
    del v11, v124  # present, but not torch's major (v11.8) or not the newest (v12.4)


def test_the_error_lists_every_place_tried(tmp_path: Path, standard: Path) -> None:
    empty = tmp_path / "empty-home"
    empty.mkdir()
    real_nvcc = tmp_path / "opt" / "cuda-12.8" / "bin" / "nvcc"
    real_nvcc.parent.mkdir(parents=True)
    real_nvcc.write_text("#!/bin/sh\n")
    real_nvcc.chmod(0o755)
    path = _wrapper(tmp_path / "usr" / "local" / "bin", real_nvcc)
    torch = _torch(tmp_path)
    environ = {"CUDA_HOME": str(empty), "CUDA_PATH_V12_8": str(tmp_path / "v12.8"), "PATH": path}
    with pytest.raises(GPUHeadersNotFoundError) as info:
        headers.find_gpu_toolkit(Backend.CUDA, torch, environ=environ)
    message = str(info.value)
    for origin, place in (
        ("$CUDA_HOME", empty),
        ("$CUDA_PATH_V12_8", tmp_path / "v12.8"),
        ("nvcc on PATH", tmp_path / "usr" / "local"),
        ("standard location", standard),
        ("nvidia-cuda-runtime wheel", torch.site_packages / "nvidia" / "cuda_runtime"),
    ):
        assert f"{origin}: {place / 'include'}" in message
    assert message.count(f": {tmp_path / 'usr' / 'local' / 'include'};") == 1  # once


def test_the_standard_location_is_not_tried_on_windows() -> None:
    if os.name == "nt":
        assert headers._STANDARD_CUDA_HOMES == ()
    else:
        assert (Path("/usr/local/cuda"),) == headers._STANDARD_CUDA_HOMES
