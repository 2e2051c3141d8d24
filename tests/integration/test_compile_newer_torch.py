"""Compile + ABI audit against every torch >= 2.10 on PyPI up to 2.15, CPU and CUDA flavour.

Torch >= 2.10 has its own exchange API, so nothing here is shipped by default; but users
force ours for A/B tests (``TORCH_C_DLPACK_EXT_FORCE=1``) and the GPU check
(``tests/gpu/gpu_check.py``) builds for the GPU machine's torch 2.11. Each release is a
cached compile-only env (``devtools.envs.torchenv``: ~0.9 GB download per torch wheel, not
kept in uv's cache; ~0.6 GB on disk once torch's GPU kernels, libtorch_cuda*.so, which
no build links, are dropped) plus the CUDA header wheels of that torch's CUDA major
(``_compile.cuda_header_wheels``: CUDA 12: nvidia-cuda-runtime-cu12 +
nvidia-cuda-nvcc-cu12; CUDA 13: nvidia-cuda-runtime + nvidia-cuda-crt). Nothing is
imported from those envs: the build reads their files.

Per release: the driver's C++ standard equals what torch's CMake config asks for, its
THPVariable check accepts the installation's header, and the CPU and CUDA libraries
compile, pass the ABI audit (inside ``compile_library``), export exactly the two entry
points and record the right toolkit. Compile times are printed (``-s``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from devtools.envs.torchenv import EnvKind, EnvObserver, torch_env

from _torch_c_dlpack_ext_core.driver import (
    BuildRequest,
    check_tensor_layout,
    compile_library,
    plan_build,
)
from _torch_c_dlpack_ext_core.headers import cuda_header_wheels, find_dlpack_include
from _torch_c_dlpack_ext_core.naming import Backend
from _torch_c_dlpack_ext_core.toolchains import AuditOutcome, toolchain_for
from _torch_c_dlpack_ext_core.toolchains.elf import dynamic_symbols
from _torch_c_dlpack_ext_core.torchinstall import TorchInstall

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
EXPORTS = {"TorchDLPackExchangeAPIPtr", "TorchCDLPackExtBuildInfo", "TorchCDLPackExtLoadProblem"}
#: Every torch release >= 2.10 on PyPI up to 2.15 (``pip index versions torch``, 2026-12-01),
#: with the CUDA version of its Linux x86_64 wheel (its ``torch/version.py``).
NEWER_TORCH = [
    ("2.10.0", "12.8"),
    ("2.11.0", "13.0"),
    ("2.12.0", "13.0"),
    ("2.12.1", "13.0"),
    ("2.13.0", "13.0"),
    ("2.14.0", "13.0"),
    ("2.14.1", "13.0"),
    ("2.15.0", "13.2"),
]


def _install(version: str, cuda: str, observer: EnvObserver) -> TorchInstall:
    env = torch_env(
        version,
        kind=EnvKind.COMPILE_ONLY,
        extra=cuda_header_wheels(cuda).split(),
        observer=observer,
    )
    return TorchInstall.from_path(env.torch_dir)


def _cmake_standard(install: TorchInstall) -> str:
    """The C++ standard TorchConfig.cmake asks for: ``CXX_STANDARD 17|20`` up to 2.14,
    the compile feature ``cxx_std_20`` in 2.15."""
    text = (install.root / "share" / "cmake" / "Torch" / "TorchConfig.cmake").read_text()
    match = re.search(r"CXX_STANDARD\s+(\d+)|cxx_std_(\d+)", text)
    assert match is not None, "TorchConfig.cmake names no C++ standard"
    return f"c++{match.group(1) or match.group(2)}"


@pytest.mark.parametrize(("version", "cuda"), NEWER_TORCH, ids=[v for v, _ in NEWER_TORCH])
def test_compile_and_audit_cpu_and_cuda(
    build_cache: Path, version: str, cuda: str, env_observer: EnvObserver
) -> None:
    install = _install(version, cuda, env_observer)
    assert install.version.startswith(version)
    assert install.cuda_version == cuda
    assert install.cxx11_abi is True
    assert Backend.CUDA in install.backends_available
    assert check_tensor_layout(install) == "PyObject_HEAD at::Tensor cdata;"
    out = build_cache / f"newer-torch{version}"
    plan = plan_build(BuildRequest(torch=install, backend="cuda", output_dir=out))
    assert plan.std == _cmake_standard(install)
    # CUDA 13's header wheels share one tree; CUDA 12's are split in two (crt/ in nvcc's).
    assert len(plan.gpu_includes) == (1 if cuda.startswith("13") else 2)
    for backend in ("cpu", "cuda"):
        started = time.monotonic()
        entry = compile_library(BuildRequest(torch=install, backend=backend, output_dir=out))
        library = out / entry.file
        print(
            f"\nBUILD torch {install.version} {backend}: {time.monotonic() - started:.1f} s "
            f"(0 on a cache hit), {entry.size} bytes, audit passed"
        )
        assert entry.file == f"libtorch_c_dlpack_ext-torch{version[:4]}-{backend}-cxx11abi1.so"
        assert entry.torch_build == install.version
        assert entry.gpu_toolkit == (cuda if backend == "cuda" else None)
        assert dynamic_symbols(library, defined=True) == EXPORTS
        assert toolchain_for("linux").audit(library, install, backend) is AuditOutcome.PASSED
        needed = subprocess.run(
            ["readelf", "-d", str(library)], capture_output=True, text=True, check=True
        ).stdout
        assert ("[libc10_cuda.so]" in needed) is (backend == "cuda")
        assert "libpython" not in needed


def test_the_header_itself_stops_a_build_for_an_unchecked_torch(
    tmp_path: Path, env_observer: EnvObserver
) -> None:
    """Past the driver (e.g. a hand-written build), csrc/tcde_python.h's #error names the
    checked releases: a torch/version.h claiming 2.16 in front of torch 2.15's headers."""
    install = _install("2.15.0", "13.2", env_observer)
    # The header defining TORCH_VERSION_MINOR (2.15: torch/headeronly/version.h, reached
    # through torch/csrc/api/include/torch/version.h), shadowed by a copy saying 16.
    defining = [
        (include, header)
        for include in install.include_dirs
        for header in sorted((include / "torch").rglob("version.h"))
        if "#define TORCH_VERSION_MINOR 15" in header.read_text()
    ]
    assert defining, "no torch header defines TORCH_VERSION_MINOR 15"
    include, real = defining[0]
    overlay = tmp_path / "overlay"
    shadow = overlay / real.relative_to(include)
    shadow.parent.mkdir(parents=True)
    shadow.write_text(real.read_text().replace("MINOR 15", "MINOR 16"))
    plan = plan_build(BuildRequest(torch=install, backend="cpu", output_dir=tmp_path / "out"))
    dlpack, _ = find_dlpack_include()
    cxx = shutil.which("c++") or "g++"
    command = [
        cxx, "-fsyntax-only", f"-std={plan.std}", "-DTCDE_BACKEND_CPU",
        f"-I{dlpack}", f"-I{overlay}", *(f"-I{p}" for p in install.include_dirs),
        f"-I{plan.python_include}", str(ROOT / "csrc" / "exchange_api.cc"),
    ]  # fmt: skip
    proc = subprocess.run(command, capture_output=True, text=True, check=False, timeout=600)
    assert proc.returncode != 0
    assert "THPVariable layout of this torch was not checked" in proc.stderr
    assert "2.10.0, 2.11.0, 2.12.0, 2.12.1, 2.13.0, 2.14.0, 2.14.1, 2.15.0" in proc.stderr
