"""devtools/base/hostenv.py: the one home of the small host and checkout facts."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from devtools.base import hostenv
from devtools.matrix import tables

from _torch_c_dlpack_ext_core.errors import ConfigError
from _torch_c_dlpack_ext_core.naming import PLATFORM_TOOLCHAINS


def test_every_native_toolchain_platform_has_an_os() -> None:
    from _torch_c_dlpack_ext_core.toolchains import TOOLCHAINS

    # A cross target (linux_aarch64) is a wheel platform tag, not a sys.platform.
    native = {
        p for p, name in PLATFORM_TOOLCHAINS.items() if TOOLCHAINS[name].target_platform is None
    }
    assert native == set(tables.OS_OF_PLATFORM)
    assert tables.host_os("win32") == "windows"
    assert tables.host_os("sunos5") is None


def test_venv_python_per_platform(tmp_path: Path) -> None:
    assert hostenv.venv_python(tmp_path, platform="win32") == tmp_path / "Scripts" / "python.exe"
    assert hostenv.venv_python(tmp_path, platform="linux") == tmp_path / "bin" / "python"


def test_dev_cache_root_honours_the_variable(tmp_path: Path) -> None:
    assert hostenv.dev_cache_root({"TCDE_DEV_CACHE": str(tmp_path)}) == tmp_path
    default = hostenv.dev_cache_root({})
    assert default == Path.home() / ".cache" / "torch-c-dlpack-ext-dev"


def test_requires_python_reads_and_validates(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    assert hostenv.requires_python(pyproject) is None
    pyproject.write_text('[project]\nname = "x"\n')
    assert hostenv.requires_python(pyproject) is None
    pyproject.write_text('[project]\nname = "x"\nrequires-python = ">=3.9"\n')
    assert hostenv.requires_python(pyproject) == ">=3.9"
    pyproject.write_text('[project]\nname = "x"\nrequires-python = "three"\n')
    with pytest.raises(ConfigError, match="not a specifier"):
        hostenv.requires_python(pyproject)


def test_find_cpython_finds_this_interpreter_and_refuses_what_no_tool_has(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The one CPython finder (the GPU twin, the benchmarks and the abi3 test all use it):
    this interpreter for its own version; no uv and no pyenv on PATH, nothing else."""
    running = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert hostenv.find_cpython(running) == Path(sys.executable)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert hostenv.find_cpython("3.2") is None


def test_find_cpython_asks_pyenv_through_the_run_helper(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Where uv finds nothing, pyenv's newest installed patch release of the version."""
    for patch in ("3.7.1", "3.7.17"):
        python = tmp_path / "root" / "versions" / patch / "bin" / "python3.7"
        python.parent.mkdir(parents=True)
        python.touch()
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "pyenv").write_text(f"#!/bin/sh\necho {tmp_path / 'root'}\n")
    (tools / "pyenv").chmod(0o755)
    monkeypatch.setenv("PATH", str(tools))
    assert (
        hostenv.find_cpython("3.7")
        == tmp_path / "root" / "versions" / "3.7.17" / "bin" / "python3.7"
    )
