"""A note about a build belongs to that build (issue 31 item 18): CUDA headers of another
major than torch's are mentioned once, when the library compiles, never on a cache hit,
and the note names what a user can set (``CUDA_HOME``, NVIDIA's header wheels), not the
driver's internal ``gpu_home`` parameter."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from tests.helpers import torch_info

from _torch_c_dlpack_ext_core import driver
from _torch_c_dlpack_ext_core.naming import Backend

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="gnu toolchain")


def _cuda13_toolkit(at: Path) -> Path:
    include = at / "include"
    (include / "crt").mkdir(parents=True)
    (include / "cuda_runtime_api.h").write_text("#define CUDART_VERSION 13000\n")
    (include / "crt" / "host_defines.h").write_text("\n")
    return at


def _fake_compiler(at: Path) -> Path:
    at.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = --version ]; then echo "g++ (GCC) 12.2.0"; exit 0; fi\n'
        'while [ "$1" != -o ]; do shift; done\n'
        'printf "library bytes" > "$2"\n',
        encoding="utf-8",
    )
    at.chmod(0o755)
    return at


def _sources(at: Path) -> Path:
    at.mkdir(parents=True)
    (at / "a.cc").write_text("int a() { return 1; }\n", encoding="utf-8")
    (at / "exports.map").write_text("{ global: a; local: *; };\n", encoding="utf-8")
    return at


@linux_only
def test_a_cuda_header_mismatch_is_said_once_when_compiling(
    fake_torch: Any,
    dlpack_include: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    prefix = fake_torch(
        "2.8.0+cu128",
        abi=True,
        cuda="12.8",
        libs=("libc10.so", "libtorch_cpu.so", "libc10_cuda.so", "libtorch_cuda.so"),
    )
    for var in ("CUDA_PATH", "CXX"):
        monkeypatch.delenv(var, raising=False)
    # What a user sets: CUDA_HOME (here a CUDA 13 toolkit for a CUDA 12.8 torch).
    monkeypatch.setenv("CUDA_HOME", str(_cuda13_toolkit(tmp_path / "cuda-13")))
    notes: list[tuple[str, ...]] = []

    def build() -> None:
        driver.compile_library(
            driver.BuildRequest(
                torch=prefix,
                backend=Backend.CUDA,
                output_dir=tmp_path / "out",
                dlpack_include=dlpack_include,
                source_dir=_sources(tmp_path / "csrc")
                if not (tmp_path / "csrc").exists()
                else tmp_path / "csrc",
                cxx=str(_fake_compiler(tmp_path / "g++")),
            ),
            driver.BuildPolicy(audit=False, echo=False),
            on_compile=lambda plan: notes.append(plan.notes),
        )

    build()
    # The build's caller says the note (the JIT prints it with its "building" line); the
    # driver prints nothing of its own with echo=False.
    assert capsys.readouterr().err == ""
    build()  # the cache hit
    assert capsys.readouterr().err == "", "a cache hit prints nothing"
    assert len(notes) == 1, "a cache hit is not a build: no note"
    (said,) = notes
    (note,) = said
    assert note.startswith("CUDA 13.0 headers for torch 2.8.0+cu128 (built with CUDA 12.8)")
    assert "set CUDA_HOME to a CUDA 12.x toolkit" in note
    assert "nvidia-cuda-nvcc-cu12==12.8.*" in note
    assert "gpu_home" not in note


def test_the_jit_says_a_builds_notes_with_its_building_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """_jit.build's on_compile prints the notes (once, with the building line)."""
    from types import SimpleNamespace

    from torch_c_dlpack_ext import _jit
    from torch_c_dlpack_ext._decide import Settings

    info = torch_info("2.8.0+cu128", Backend.CUDA, cuda_version="12.8")

    def compile_library(*_: Any, on_compile: Any) -> Any:
        plan = SimpleNamespace(filename="libx.so", notes=("CUDA 13.0 headers for torch ...",))
        on_compile(plan)
        raise driver.BuildError("stop here")

    monkeypatch.setattr(driver, "compile_library", compile_library)
    torch = SimpleNamespace(__file__=str(tmp_path / "torch" / "__init__.py"))
    with pytest.raises(driver.BuildError):
        _jit.build(torch, info, Backend.CUDA, Settings(cache_dir=tmp_path / "cache"))
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("torch-c-dlpack-ext: building libx.so for torch 2.8.0+cu128")
    assert lines[1:] == ["torch-c-dlpack-ext: note: CUDA 13.0 headers for torch ..."]


def test_the_jit_refuses_a_torch_without_a_file_before_compiling(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A torch module with no ``__file__`` (a namespace or in-memory import) has no
    installation directory to compile against: a typed error, and no compile."""
    import types

    from torch_c_dlpack_ext import _jit
    from torch_c_dlpack_ext._decide import Settings
    from torch_c_dlpack_ext.errors import TorchInstallError

    info = torch_info()
    compiled: list[object] = []
    monkeypatch.setattr(driver, "compile_library", lambda *a, **k: compiled.append(a))
    torch = types.ModuleType("torch")
    torch.__file__ = None
    with pytest.raises(TorchInstallError, match=r"torch 2\.8\.0\+cpu has no __file__"):
        _jit.build(torch, info, Backend.CPU, Settings(cache_dir=tmp_path / "cache"))
    assert compiled == []
