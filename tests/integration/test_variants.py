"""Variant-aware installs: uv with ``--preview-features wheel-variants`` must install a
wheel that serves the environment, never one built for another torch.

What uv 0.13.9 does with our metadata (checked): it reads the variants index, skips
the ``abi_dependency`` provider ("unsupported wheel variant provider") and the
``amd`` plugin, so no variant qualifies and it installs the non-variant combined
wheel, which carries every library. Had the variants declared only ``nvidia``
properties, uv would pick a CUDA variant of *any* torch version; the
``abi_dependency :: torch :: X.Y`` property is what keeps it safe. The assertions
below check that safety property, not uv's current choice, so they keep holding
when uv learns ``abi_dependency`` and starts choosing the matching variant.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.helpers import clean_env, devtools_env

pytestmark = pytest.mark.slow

if not (sys.platform.startswith("linux") and platform.machine() == "x86_64"):
    pytest.skip("the test cells are linux_x86_64 cells", allow_module_level=True)

CELLS = ("linux_x86_64-t28_cpu", "linux_x86_64-t26_cpu_abi0", "linux_x86_64-t28_cuda")
FORCE_CUDA = {
    "NV_VARIANT_PROVIDER_FORCE_CUDA_DRIVER_VERSION": "12.8",
    "NV_VARIANT_PROVIDER_FORCE_SM_ARCH": "9.0",
}


def _run(cmd: list[str], env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        cmd, env=env or clean_env(), capture_output=True, text=True, timeout=1800, check=False
    )
    assert proc.returncode == 0, f"{cmd}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def links(tmp_path_factory: pytest.TempPathFactory, build_cache: Path) -> Path:
    """A find-links directory: variant wheels, the combined wheel and the variants index."""
    dist = tmp_path_factory.mktemp("dist")
    _run(
        [sys.executable, "-m", "devtools", "build", "--cells", ",".join(CELLS), "--out", str(dist),
         "--build-dir", str(build_cache / "cells")],
        env=devtools_env(),
    )  # fmt: skip
    assert len(list(dist.glob("*-cp39-abi3-*-t2*.whl"))) == 3
    return dist


@pytest.mark.parametrize("forced", [True, False], ids=["cuda-driver-forced", "no-gpu"])
def test_uv_wheel_variants_installs_a_wheel_that_serves_torch_28(
    links: Path, tmp_path: Path, old_torch_env: Callable[[str], Any], forced: bool
) -> None:
    from devtools.base.steps import find_uv

    env = old_torch_env("2.8.0")
    target = tmp_path / "site"
    environ = clean_env(**(FORCE_CUDA if forced else {}))
    log = _run(
        [find_uv(), "pip", "install", "-v", "--preview-features", "wheel-variants",
         "--python", str(env.python), "--target", str(target), "--no-index",
         "--find-links", str(links), "--no-deps", "torch-c-dlpack-ext"],
        env=environ,
    )  # fmt: skip
    assert "wheel-variants" in log  # the preview feature was on
    manifest = json.loads((target / "torch_c_dlpack_ext" / "manifest.json").read_text())
    served = {(e["torch"], e["backend"]) for e in manifest["libraries"]}
    assert {torch for torch, _ in served} == {"2.8"} or ("2.8", "cpu") in served, (
        f"uv installed a wheel without torch 2.8's library: {served}"
    )
    variant = list(target.glob("*.dist-info/variant.json"))
    if variant:  # a variant was chosen: it must be torch 2.8's, holding its one library
        labels = json.loads(variant[0].read_text())["variants"]
        assert list(labels) in (["t28_cpu"], ["t28_cuda"])
        assert len(manifest["libraries"]) == 1
    proc = subprocess.run(
        [str(env.python), "-m", "torch_c_dlpack_ext", "--json"],
        env=clean_env(PYTHONPATH=str(target)),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    report = json.loads(proc.stdout)
    decision = report["decision"]
    # The selector serves this torch with the library of the backend it describes it
    # with; the installed wheel either has it (load) or must say what is missing.
    backend = report["torch"]["backend"]
    if ("2.8", backend) in served:
        assert decision["kind"] == "load", decision
        want = f"libtorch_c_dlpack_ext-torch2.8-{backend}-cxx11abi1.so"
        assert Path(decision["library"]).name == want
    else:
        assert decision["kind"] == "unavailable", decision
        assert decision["remedy"], decision


def test_uv_reads_our_variants_index(links: Path, tmp_path: Path) -> None:
    """uv parses the index and names the providers it skips (so the metadata reached it)."""
    from devtools.base.steps import find_uv

    venv = tmp_path / "venv"
    _run([find_uv(), "venv", "--quiet", "--python", sys.executable, str(venv)])
    log = _run(
        [find_uv(), "pip", "install", "-v", "--preview-features", "wheel-variants",
         "--python", str(venv / "bin" / "python"), "--no-index", "--find-links", str(links),
         "--no-deps", "--dry-run", "torch-c-dlpack-ext"],
        env=clean_env(**FORCE_CUDA),
    )  # fmt: skip
    assert "abi_dependency" in log
    chosen = [line for line in log.splitlines() if "Selecting: torch-c-dlpack-ext" in line]
    assert chosen, log[-3000:]
    # No torch installed at all: only a non-variant wheel may be chosen.
    assert chosen[-1].rstrip(")").endswith("x86_64.whl"), chosen[-1]
