"""One JIT build serves every venv of the same torch build (issue 21 item 2).

Two venvs with one torch wheel install it, the shipped ``csrc/`` and tvm-ffi's DLPack
headers at different paths. The cache must not care: the second venv's import compiles
nothing, and the first venv's build survives it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from tests.helpers import clean_env, make_package, run_python

torch = pytest.importorskip("torch")
tvm_ffi = pytest.importorskip("tvm_ffi")

P = "TORCH_C_DLPACK_EXT_"

BUILD = r"""
import json, warnings
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import torch
import tvm_ffi, torch_c_dlpack_ext as pkg
path = pkg.build_for_current_torch()
print(json.dumps({"path": str(path), "torch": torch.__file__, "tvm_ffi": tvm_ffi.__file__,
                  "package": pkg.__file__, "kind": pkg.status().kind.value}))
"""


def _link_tree(source: Path, target: Path) -> None:
    """``source`` copied to ``target`` as hard links where the file system allows (what
    uv does from its cache), else as copies."""
    try:
        shutil.copytree(source, target, copy_function=os.link)
    except OSError:
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(source, target)


def _second_venv(root: Path) -> Path:
    """A real venv of the running Python whose own site-packages holds the running torch
    and tvm-ffi at new paths; the rest of what they import comes from the running env
    through a ``.pth`` (entries it adds follow the venv's own site-packages)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / ("Scripts/python.exe" if sys.platform.startswith("win") else "bin/python")
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True, capture_output=True, text=True,
        ).stdout.strip()
    )  # fmt: skip
    running_site = Path(sysconfig.get_paths()["purelib"])
    for module in (torch, tvm_ffi):
        package = Path(module.__file__).parent
        _link_tree(package, site / package.name)
    (site / "running-env.pth").write_text(f"{running_site}\n", encoding="utf-8")
    return python


def _build(python: Path | str, package: Path, cache: Path) -> tuple[dict[str, str], str]:
    env = clean_env(**{P + "CACHE_DIR": str(cache)})
    proc = run_python(BUILD, pythonpath=[package], env=env, python=python, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, str] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result, proc.stderr


@pytest.mark.slow
def test_a_second_venv_of_the_same_torch_reuses_the_build(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    package_a = make_package(tmp_path / "pkg-a", manifest=False)
    package_b = make_package(tmp_path / "pkg-b", manifest=False)
    python_b = _second_venv(tmp_path / "venv-b")

    first, stderr = _build(sys.executable, package_a, cache)
    assert first["kind"] == "jit"
    assert "torch-c-dlpack-ext: building" in stderr
    library = Path(first["path"])
    built = library.stat()

    second, stderr = _build(python_b, package_b, cache)
    # Really another venv: its own torch, tvm-ffi (DLPack headers) and csrc/.
    for key in ("torch", "tvm_ffi", "package"):
        assert Path(second[key]).parent != Path(first[key]).parent, key
    assert Path(second["torch"]).is_relative_to(tmp_path / "venv-b")
    assert second["kind"] == "jit"
    assert second["path"] == first["path"]
    assert "building" not in stderr, "the second venv compiled again"
    after = library.stat()
    assert (after.st_ino, after.st_mtime_ns) == (built.st_ino, built.st_mtime_ns), (
        "the first venv's build was replaced"
    )

    third, stderr = _build(sys.executable, package_a, cache)
    assert third["path"] == first["path"]
    assert "building" not in stderr
    assert library.stat().st_ino == built.st_ino
