"""The drop-in contract with the real apache-tvm-ffi from PyPI on a real torch 2.8.

tvm-ffi's import does ``import torch_c_dlpack_ext`` and then reads
``torch.Tensor.__dlpack_c_exchange_api__``. With our package (a bundled library
built for this torch) on ``PYTHONPATH``, that must be our capsule and
``tvm_ffi.from_dlpack`` must round-trip data; with a broken library, ``import
tvm_ffi`` must still succeed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.helpers import (
    Bundled,
    bundle_portable,
    clean_env,
    make_package,
    run_python,
)

from _torch_c_dlpack_ext_core.manifest import ManifestEntry

pytestmark = pytest.mark.slow

TORCH = "2.8.0"


@pytest.fixture(scope="module")
def tvm_env(old_torch_env: Callable[[str], Any]) -> Any:
    # The suite's env: apache-tvm-ffi, and the CUDA headers the CUDA library compiles
    # against (torch 2.8 is a CUDA 12.8 build).
    return old_torch_env(TORCH)


@pytest.fixture(scope="module")
def library28(tvm_env: Any, build_cache: Path) -> tuple[Path, ManifestEntry]:
    from _torch_c_dlpack_ext_core.driver import BuildRequest, compile_library

    # PyPI's torch 2.8 is a CUDA build: the selector gives it the CUDA library (which
    # serves CPU tensors too, GPU or not), never the CPU one.
    out = build_cache / f"dropin-torch{TORCH}-cuda"
    entry = compile_library(BuildRequest(torch=tvm_env.torch_dir, backend="cuda", output_dir=out))
    return out / entry.file, entry


def bundle(library: Path, entry: ManifestEntry) -> Bundled:
    return Bundled(library, entry.torch, entry.backend, entry.cxx11_abi, entry.torch_build)


def tvm_environ(tmp_path: Path, **extra: str) -> dict[str, str]:
    # tvm-ffi's own JIT fallback, if it tries one, writes only under tmp_path.
    return clean_env(TVM_FFI_CACHE_DIR=str(tmp_path / "tvm-cache"), **extra)


DROPIN = r"""
import ctypes, sys
import torch
assert not hasattr(torch.Tensor, "__dlpack_c_exchange_api__"), "torch 2.8 has no API"
import tvm_ffi
assert "torch_c_dlpack_ext" in sys.modules, "tvm_ffi did not import torch_c_dlpack_ext"
import torch_c_dlpack_ext as ext
from torch_c_dlpack_ext._library import loaded_library
status = ext.status()
assert status.kind.value == "load", status
ours = loaded_library(status.library).pointer
get = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))
assert get(torch.Tensor.__dlpack_c_exchange_api__, b"dlpack_exchange_api") == ours
assert torch.Tensor.__c_dlpack_exchange_api__ == ours
x = torch.arange(12, dtype=torch.float32).reshape(3, 4)[:, 1:]
t = tvm_ffi.from_dlpack(x)
assert tuple(t.shape) == (3, 3), t.shape
y = torch.from_dlpack(t)
assert torch.equal(x, y) and y.data_ptr() == x.data_ptr()
print("dropin ok", tvm_ffi.__version__ if hasattr(tvm_ffi, "__version__") else "")
"""


def test_tvm_ffi_picks_up_our_api(
    tmp_path: Path, tvm_env: Any, library28: tuple[Path, ManifestEntry]
) -> None:
    root = make_package(tmp_path / "pkg", [bundle(*library28)])
    proc = run_python(
        DROPIN, pythonpath=[root], env=tvm_environ(tmp_path), python=tvm_env.python, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    assert "dropin ok" in proc.stdout
    # Our library served tvm-ffi: its own JIT never ran.
    assert not any((tmp_path / "tvm-cache").glob("*.so"))


BROKEN = r"""
import torch, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import tvm_ffi
import torch_c_dlpack_ext as ext
ours = [str(w.message) for w in caught if issubclass(w.category, ext.TorchCDLPackExtWarning)]
assert ext.status().kind.value == "unavailable", ext.status()
assert len(ours) == 1, ours
print("ours:", ours[0])
x = torch.arange(6, dtype=torch.float32)
assert torch.equal(torch.from_dlpack(tvm_ffi.from_dlpack(x)), x)
print("import ok")
"""


def test_broken_library_does_not_break_import_tvm_ffi(
    tmp_path: Path, tvm_env: Any, library28: tuple[Path, ManifestEntry]
) -> None:
    library, entry = library28
    broken = tmp_path / "broken" / library.name
    broken.parent.mkdir()
    broken.write_bytes(library.read_bytes()[: library.stat().st_size // 3])
    root = make_package(tmp_path / "pkg", [bundle(broken, entry)])
    # No compiler on PATH: if tvm-ffi falls back to its JIT, it fails fast (and only
    # warns) instead of compiling for minutes; nm stays for completeness.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    nm = shutil.which("nm")
    if nm:
        (bin_dir / "nm").symlink_to(nm)
    proc = run_python(
        BROKEN,
        pythonpath=[root],
        env=tvm_environ(tmp_path, PATH=str(bin_dir)),
        python=tvm_env.python,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    assert "import ok" in proc.stdout
    assert "truncated" in proc.stdout


ADDON_FIRST = r"""
import sys
import torch
import tvm_ffi  # torch-c-dlpack-ext not importable yet: tvm-ffi JIT-builds its own addon
assert "torch_c_dlpack_ext" not in sys.modules
assert hasattr(torch.Tensor, "__dlpack_c_exchange_api__"), "tvm-ffi published no table"
sys.path.insert(0, sys.argv[1])
import torch_c_dlpack_ext as ext
status = ext.status()
assert status.kind.value == "defer", status
print("reason:", status.reason)
"""


def test_a_table_tvm_ffi_published_is_named_as_tvm_ffis(
    tmp_path: Path, library28: tuple[Path, ManifestEntry], env_observer: Any
) -> None:
    """Issue 21 item 1, with real tvm-ffi: its JIT-built addon (it exports
    ``TorchDLPackExchangeAPIPtr`` too) published the table before our import; the status
    names its image and never calls it this package's."""
    from devtools.envs.torchenv import EnvKind, torch_env

    # setuptools: tvm-ffi builds its addon with torch.utils.cpp_extension.
    env = torch_env(
        TORCH,
        kind=EnvKind.IMPORTABLE,
        extra=["apache-tvm-ffi", "setuptools", "nvidia-cuda-runtime-cu12==12.8.*",
               "nvidia-cuda-nvcc-cu12==12.8.*"],
        observer=env_observer,
    )  # fmt: skip
    root = make_package(tmp_path / "pkg", [bundle(*library28)])
    proc = run_python(
        ADDON_FIRST,
        args=[str(root)],
        env=tvm_environ(tmp_path),
        python=env.python,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    (addon,) = (tmp_path / "tvm-cache").glob("libtorch_c_dlpack_addon_*.so")
    reason = proc.stdout.split("reason:", 1)[1].strip()
    assert reason.startswith(addon.name), reason
    assert "it is used, not this package's library" in reason, reason
    assert "an earlier import in this process" not in reason, reason


#: ``python -W error`` runs it: every warning on the way is an error, ours included.
STRICT = r"""
import json, sys
import torch
import tvm_ffi
assert "torch_c_dlpack_ext" in sys.modules, "tvm_ffi did not import torch_c_dlpack_ext"
import torch_c_dlpack_ext as ext
status = ext.status()
x = torch.arange(12, dtype=torch.float32).reshape(3, 4)[:, 1:]
y = tvm_ffi.get_global_func("testing.echo")(x)
assert torch.equal(x, y) and y.data_ptr() == x.data_ptr()
t = tvm_ffi.from_dlpack(x)
assert torch.from_dlpack(t).data_ptr() == x.data_ptr()
print(json.dumps({"kind": status.kind.value, "warnings": list(status.warnings),
                  "torch": torch.__version__}))
"""


@pytest.mark.parametrize(
    "case", ["native-2.8", "portable-forced-2.8", "portable-2.3"], ids=str
)  # fmt: skip
def test_import_tvm_ffi_under_w_error(
    request: pytest.FixtureRequest, tmp_path: Path, case: str
) -> None:
    """``python -W error -c "import tvm_ffi"`` and a round trip, where the import selects a
    table: our native library of torch 2.8, the portable table forced over it
    (``TORCH_C_DLPACK_EXT_PORTABLE=1``), and the portable table on PyPI's torch 2.3.1,
    which no native library serves. Nothing warns, so nothing fails, and tvm-ffi compiles
    nothing."""
    extra: dict[str, str] = {}
    if case.endswith("2.8"):
        env = request.getfixturevalue("tvm_env")
        root = make_package(tmp_path / "pkg", [bundle(*request.getfixturevalue("library28"))])
    else:
        env = request.getfixturevalue("torch23_env")
        root = make_package(tmp_path / "pkg")
    if case.startswith("portable"):
        bundle_portable(root, request.getfixturevalue("portable_library"))
    if case == "portable-forced-2.8":
        extra["TORCH_C_DLPACK_EXT_PORTABLE"] = "1"
    proc = subprocess.run(
        [str(env.python), "-W", "error", "-c", STRICT],
        env={**tvm_environ(tmp_path, **extra), "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["kind"] == ("load" if case == "native-2.8" else "portable"), result
    assert result["warnings"] == [], result
    assert not any((tmp_path / "tvm-cache").glob("*.so"))
