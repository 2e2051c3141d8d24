"""Where NVIDIA's CUDA header wheels put the headers in a torch tree has one owner,
``_torch_c_dlpack_ext_core.headers``: CUDA 12's per-component ``nvidia/cuda_runtime`` (with
``crt/`` in ``nvidia/cuda_nvcc``) and CUDA 13's shared ``nvidia/cu13``. The per-cell build
(``devtools/build/cellbuild.py``) asks it for the ``gpu_home`` of a CUDA cell."""

from __future__ import annotations

import dataclasses
import types
from pathlib import Path
from typing import Any, cast

import pytest
from devtools.build import cellbuild as build
from devtools.envs import torchenv
from devtools.matrix.cells import Cell
from devtools.matrix.reader import load_matrix

from _torch_c_dlpack_ext_core import driver
from _torch_c_dlpack_ext_core.errors import BuildError
from _torch_c_dlpack_ext_core.headers import cuda_wheel_home, find_gpu_toolkit
from _torch_c_dlpack_ext_core.naming import Backend
from _torch_c_dlpack_ext_core.torchinstall import TorchInstall


def _cuda12_tree(site: Path) -> Path:
    """nvidia-cuda-runtime-cu12 + nvidia-cuda-nvcc-cu12 as they install."""
    runtime = site / "nvidia" / "cuda_runtime"
    (runtime / "include").mkdir(parents=True)
    (runtime / "include" / "cuda_runtime_api.h").write_text("#define CUDART_VERSION 12080\n")
    crt = site / "nvidia" / "cuda_nvcc" / "include" / "crt"
    crt.mkdir(parents=True)
    (crt / "host_defines.h").write_text("\n")
    return runtime


def _cuda13_tree(site: Path) -> Path:
    """nvidia-cuda-runtime + nvidia-cuda-crt 13.x: one shared tree."""
    tree = site / "nvidia" / "cu13"
    (tree / "include" / "crt").mkdir(parents=True)
    (tree / "include" / "cuda_runtime_api.h").write_text("#define CUDART_VERSION 13000\n")
    (tree / "include" / "crt" / "host_defines.h").write_text("\n")
    return tree


def test_the_cuda12_layout(tmp_path: Path) -> None:
    assert cuda_wheel_home(tmp_path, "12.8") == _cuda12_tree(tmp_path)


def test_the_cuda13_layout(tmp_path: Path) -> None:
    assert cuda_wheel_home(tmp_path, "13.0") == _cuda13_tree(tmp_path)


def test_the_tree_of_the_cuda_major_comes_first(tmp_path: Path) -> None:
    runtime, cu13 = _cuda12_tree(tmp_path), _cuda13_tree(tmp_path)
    assert cuda_wheel_home(tmp_path, "13.0") == cu13
    # A CUDA 12 torch names no shared tree: the trees are tried in the finder's order.
    assert cuda_wheel_home(tmp_path, "12.8") in (runtime, cu13)


@pytest.mark.parametrize(
    ("version", "expected"), [("12.8", "nvidia/cuda_runtime"), ("13.0", "nvidia/cu13")]
)
def test_incomplete_headers_name_the_tree_the_wheels_would_make(
    tmp_path: Path, version: str, expected: str
) -> None:
    # Runtime headers without crt/: the finder then names this tree in its error.
    assert cuda_wheel_home(tmp_path, version) == tmp_path / expected
    (tmp_path / "nvidia" / "cuda_runtime" / "include").mkdir(parents=True)
    (tmp_path / "nvidia" / "cuda_runtime" / "include" / "cuda_runtime_api.h").write_text("\n")
    assert cuda_wheel_home(tmp_path, version) == tmp_path / expected


@pytest.mark.parametrize(("version", "make"), [("12.8", _cuda12_tree), ("13.0", _cuda13_tree)])
def test_the_finder_takes_what_it_names(tmp_path: Path, version: str, make: Any) -> None:
    home = make(tmp_path)
    # What the finder reads of the install when given gpu_home: the CUDA version.
    torch = types.SimpleNamespace(cuda_version=version, site_packages=tmp_path, version="2.9.0")
    includes, toolkit = find_gpu_toolkit(
        Backend.CUDA, cast(TorchInstall, torch), gpu_home=cuda_wheel_home(tmp_path, version)
    )
    assert includes[0] == (home / "include").resolve()
    assert toolkit == version


def _cuda_cell(toolkit: str) -> Cell:
    (cell,) = load_matrix().select(["linux_x86_64-t28_cuda"])
    return dataclasses.replace(cell, wheel=dataclasses.replace(cell.wheel, toolkit=toolkit))


@pytest.mark.parametrize(("toolkit", "make"), [("12.8", _cuda12_tree), ("13.0", _cuda13_tree)])
def test_the_build_compiles_against_the_trees_headers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, toolkit: str, make: Any
) -> None:
    site = tmp_path / "site"
    home = make(site)
    tree = types.SimpleNamespace(torch_dir=tmp_path / "torch", site_packages=site)
    monkeypatch.setattr(torchenv, "torch_tree", lambda *a, **k: tree)
    seen: list[Path | None] = []

    def compile_library(request: driver.BuildRequest, *_: Any, **__: Any) -> Any:
        seen.append(request.gpu_home)
        raise BuildError("stop here")

    monkeypatch.setattr(driver, "compile_library", compile_library)
    result = build.build_one(_cuda_cell(toolkit), tmp_path / "cells")
    assert result.status == "failed"
    assert seen == [home]
