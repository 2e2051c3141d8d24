"""``TORCH_C_DLPACK_EXT_BACKEND`` naming a GPU backend that is not torch's build flavour
(issue 31, item 8): ``rocm`` on a CUDA torch was called "a rocm torch", and the remedy
offered a JIT build that then failed. The override conflicts with the torch build: say
so, and offer what works (unset it, or ``cpu``), never the JIT. The running torch is made
a CUDA build by setting ``torch.version.cuda``, as the backend is read from it."""

from __future__ import annotations

import pytest
from tests.helpers import (
    CUDA_TORCH,
    IMPORT_PROBE,
    Bundled,
    build_fake_library,
    clean_env,
    make_package,
    run_python,
)

from _torch_c_dlpack_ext_core.naming import Backend

torch = pytest.importorskip("torch")

P = "TORCH_C_DLPACK_EXT_"


@pytest.mark.parametrize("jit", [False, True], ids=["plain", "jit"])
def test_rocm_override_on_a_cuda_torch_conflicts_with_the_build(tmp_path, jit: bool) -> None:
    import json

    minor = ".".join(torch.__version__.split(".")[:2])
    cpu = build_fake_library(tmp_path / "lib", f"FAKE_TORCH_MINOR={minor.split('.')[1]}")
    abi = bool(torch.compiled_with_cxx11_abi())
    root = make_package(
        tmp_path / "pkg", [Bundled(cpu, minor, Backend.CPU, abi, torch.__version__)]
    )
    env = {P + "BACKEND": "rocm", P + "FORCE": "1", **({P + "JIT": "1"} if jit else {})}
    proc = run_python(
        CUDA_TORCH + IMPORT_PROBE,
        pythonpath=[root],
        env=clean_env(**env, **{P + "CACHE_DIR": str(tmp_path / "cache")}),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["kind"] == "unavailable", result
    (warning,) = result["warnings"]
    assert f"{P}BACKEND=rocm conflicts with the torch build" in warning, warning
    assert "is a CUDA build (torch.version.cuda 12.8)" in warning, warning
    assert "a rocm torch" not in warning, warning
    assert f"{P}JIT=1" not in warning, warning
    assert "build the rocm library" not in warning, warning
    assert f"unset {P}BACKEND to use this torch's cuda library" in warning.replace("Unset", "unset")
    assert not (tmp_path / "cache").exists(), "a JIT build was attempted"
