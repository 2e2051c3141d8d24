"""The import asks no device anything (issue 18), on real torch.

``torch.cuda.is_available()`` runs ``cudaGetDeviceCount`` (``cuInit`` on a GPU host): it
poisons later ``fork()``s and freezes ``CUDA_VISIBLE_DEVICES`` for every process that
imports tvm-ffi. The backend is therefore the build flavour (``torch.version.hip`` ->
rocm, ``torch.version.cuda`` -> cuda, else cpu), and spies on every CUDA query torch has
must see nothing during ``import torch_c_dlpack_ext`` (or ``status()``): on the running
torch (2.13, defer path and the selector's paths) and on PyPI's torch 2.8.0, a CUDA 12.8
build, which on this GPU-less host now loads the CUDA library, and that library serves CPU
tensors (a round trip through the published capsule). The portable table, too: forced
on the running torch (``TORCH_C_DLPACK_EXT_PORTABLE=1``), and selected on PyPI's torch
2.3.1, a CUDA 12.1 build older than every native library.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.helpers import (
    CUDA_SPY,
    Bundled,
    bundle_portable,
    clean_env,
    make_package,
    run_python,
)

from _torch_c_dlpack_ext_core.manifest import ManifestEntry
from _torch_c_dlpack_ext_core.naming import Backend

P = "TORCH_C_DLPACK_EXT_"
OLD = "2.8.0"

#: Wraps every CUDA query torch has (those that exist in this build), imports the package,
#: asks status(), then runs the diagnostics' round trip through the published capsule.
SPY = (
    r"""
import json, sys
import torch
"""
    + CUDA_SPY
    + r"""import torch_c_dlpack_ext
status = torch_c_dlpack_ext.status()
during_import = list(CUDA_CALLS)
initialized = bool(torch.cuda.is_initialized())
from torch_c_dlpack_ext.__main__ import smoke_test
smoke = smoke_test(torch) if status.published else None
print(json.dumps({
    "calls": during_import,
    "initialized": initialized,
    "kind": status.kind.value,
    "backend": status.torch.backend.value if status.torch else None,
    "library": str(status.library) if status.library else None,
    "warnings": list(status.warnings),
    "smoke": [smoke.ok, smoke.detail] if smoke else None,
    "cuda_build": torch.version.cuda,
}))
"""
)


def spy_import(root: Path | None, python: Path | str = sys.executable, **env: str) -> Any:
    pythonpath = [root] if root is not None else [Path(__file__).parents[2] / "python"]
    proc = run_python(SPY, pythonpath=pythonpath, env=clean_env(**env), python=python, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    ("case", "env"),
    [
        ("defer-fast-path", {}),
        ("force-load", {P + "FORCE": "1"}),
        ("force-unavailable", {P + "FORCE": "1", P + "BACKEND": "cuda"}),
        ("jit-without-compiler", {P + "FORCE": "1", P + "JIT": "1", "CXX": "/nonexistent"}),
        # The portable table (bundled beside the native library), forced over torch's own.
        ("portable-forced", {P + "PORTABLE": "1"}),
    ],
)
def test_no_cuda_query_on_the_running_torch(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    torch213_library: tuple[Path, ManifestEntry],
    case: str,
    env: dict[str, str],
) -> None:
    torch = pytest.importorskip("torch")
    library, entry = torch213_library
    minor = ".".join(torch.__version__.split(".")[:2])
    bundled = Bundled(library, minor, Backend.CPU, entry.cxx11_abi, torch.__version__)
    root = make_package(tmp_path, [bundled])
    if case.startswith("portable"):
        bundle_portable(root, request.getfixturevalue("portable_library"))
    if "JIT" in "".join(env):
        env = {**env, P + "CACHE_DIR": str(tmp_path / "cache")}
        (root / "torch_c_dlpack_ext" / "manifest.json").unlink()
    result = spy_import(root, **env)
    assert result["calls"] == [], result
    assert result["initialized"] is False
    expected = {"defer-fast-path": "defer", "force-load": "load", "portable-forced": "portable"}
    assert result["kind"] == expected.get(case, "unavailable"), result
    if result["kind"] in ("load", "portable"):
        assert result["smoke"][0], result["smoke"]


@pytest.fixture(scope="module")
def cuda_library_env(build_cache: Path, old_torch_env: Any) -> tuple[Any, Path, ManifestEntry]:
    """PyPI's torch 2.8.0 (a CUDA 12.8 build), importable, with the CUDA headers the CUDA
    library compiles against; and that library, compiled (cached by the driver)."""
    from _torch_c_dlpack_ext_core.driver import BuildRequest, compile_library

    env = old_torch_env(OLD)
    out = build_cache / "no-cuda-at-import-torch2.8.0-cuda"
    entry = compile_library(BuildRequest(torch=Path(env.torch_dir), backend="cuda", output_dir=out))
    assert entry.backend is Backend.CUDA
    return env, out / entry.file, entry


@pytest.mark.slow
def test_cuda_torch_without_gpu_loads_the_cuda_library_and_asks_no_device(
    tmp_path: Path, cuda_library_env: tuple[Any, Path, ManifestEntry]
) -> None:
    """Real torch 2.8.0+cu128 on a host with no GPU: the flavour says cuda, so the CUDA
    library is loaded (no CPU library is bundled here, and none would be taken), its
    capsule round-trips a CPU tensor, and no CUDA query ran."""
    env, library, entry = cuda_library_env
    root = make_package(
        tmp_path, [Bundled(library, "2.8", Backend.CUDA, entry.cxx11_abi, entry.torch_build)]
    )
    result = spy_import(root, python=env.python)
    assert result["cuda_build"] == "12.8", result
    assert result["calls"] == [], result
    assert result["initialized"] is False
    assert result["kind"] == "load", result
    assert result["backend"] == "cuda", result
    assert result["library"].endswith(entry.file), result
    assert result["warnings"] == [], result
    assert result["smoke"][0], result["smoke"]
    assert "cpu tensor" in result["smoke"][1], result["smoke"]


@pytest.mark.slow
def test_cpu_library_never_serves_a_cuda_torch_unless_asked(
    tmp_path: Path,
    cuda_library_env: tuple[Any, Path, ManifestEntry],
    old_torch_env: Callable[[str], Any],
    build_cache: Path,
) -> None:
    """The same real torch 2.8.0+cu128 with only a CPU library bundled: nothing published
    (the remedies name the CUDA library), unless ``BACKEND=cpu`` asks for it. No CUDA query
    either way."""
    from _torch_c_dlpack_ext_core.driver import BuildRequest, compile_library

    env, _, _ = cuda_library_env
    out = build_cache / "no-cuda-at-import-torch2.8.0-cpu"
    cpu = compile_library(BuildRequest(torch=Path(env.torch_dir), backend="cpu", output_dir=out))
    root = make_package(
        tmp_path, [Bundled(out / cpu.file, "2.8", Backend.CPU, cpu.cxx11_abi, cpu.torch_build)]
    )
    refused = spy_import(root, python=env.python)
    assert refused["calls"] == [], refused
    assert refused["kind"] == "unavailable", refused
    assert "no bundled cuda library" in refused["warnings"][0].lower(), refused
    asked = spy_import(root, python=env.python, **{P + "BACKEND": "cpu"})
    assert asked["calls"] == [], asked
    assert asked["kind"] == "load", asked
    assert asked["smoke"][0], asked["smoke"]


@pytest.mark.slow
def test_torch_below_the_matrix_gets_the_portable_table_and_asks_no_device(
    tmp_path: Path, torch23_env: Any, portable_library: Path
) -> None:
    """PyPI's torch 2.3.1+cu121 (older than every native library) on a host with no
    GPU: the portable table is selected (the package bundles only it), its capsule
    round-trips a CPU tensor, nothing is said, and no CUDA query ran."""
    root = bundle_portable(make_package(tmp_path), portable_library)
    result = spy_import(root, python=torch23_env.python)
    assert result["cuda_build"] == "12.1", result
    assert result["calls"] == [], result
    assert result["initialized"] is False
    assert result["kind"] == "portable", result
    assert result["backend"] == "cuda", result
    assert result["warnings"] == [], result
    assert result["smoke"][0], result["smoke"]
    assert "cpu tensor" in result["smoke"][1], result["smoke"]
