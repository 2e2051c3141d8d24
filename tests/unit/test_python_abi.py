"""The Python ABI comes from how CPython was built (``Py_GIL_DISABLED``), never from the
runtime GIL state (issue 31 item 2): a 3.13t started with ``PYTHON_GIL=1`` has the GIL
enabled but the free-threaded object header, so it must not share cp313's JIT cache (a
rebuild loop, and a segfault where the cache is read-only)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from tests.helpers import torch_info

from _torch_c_dlpack_ext_core import naming
from _torch_c_dlpack_ext_core.naming import ABI3, Backend
from torch_c_dlpack_ext import _jit

ROOT = Path(__file__).resolve().parents[2]
MINOR = f"{sys.version_info[0]}{sys.version_info[1]}"
#: A free-threaded CPython the developer tools built (never built by this test: 30 min).
FREE_THREADED = sorted(
    Path.home().glob(".cache/torch-c-dlpack-ext-dev/python/3.*t/bin/python3.*t"), reverse=True
)


def fake_build(monkeypatch: pytest.MonkeyPatch, *, gil_disabled: bool, gil_now: bool) -> None:
    """This interpreter as if built with(out) ``--disable-gil`` and running with(out) the GIL."""
    real = sysconfig.get_config_var

    def get_config_var(name: str) -> object:
        return int(gil_disabled) if name == "Py_GIL_DISABLED" else real(name)

    monkeypatch.setattr(sysconfig, "get_config_var", get_config_var)
    monkeypatch.setattr(sys, "_is_gil_enabled", lambda: gil_now, raising=False)


@pytest.mark.parametrize("gil_now", [True, False], ids=["PYTHON_GIL=1", "PYTHON_GIL=0"])
def test_a_free_threaded_build_is_free_threaded_whatever_its_gil_does(
    monkeypatch: pytest.MonkeyPatch, gil_now: bool
) -> None:
    fake_build(monkeypatch, gil_disabled=True, gil_now=gil_now)
    assert naming.free_threaded_build()
    assert naming.python_tag() == f"cp{MINOR}t"
    assert _jit.python_tag() == f"cp{MINOR}t"
    assert naming.running_python_target() == f"{sys.version_info[0]}.{sys.version_info[1]}t"


def test_a_gil_build_is_abi3_even_if_the_runtime_says_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_build(monkeypatch, gil_disabled=False, gil_now=False)
    assert _jit.python_tag() == f"cp{MINOR}"
    assert naming.running_python_target() == ABI3


def test_the_gil_flag_does_not_change_the_jit_cache_directory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    info = torch_info()
    keys = set()
    for gil_now in (True, False):
        fake_build(monkeypatch, gil_disabled=True, gil_now=gil_now)
        keys.add(_jit.cache_key(info, Backend.CPU, _jit.python_tag()))
    fake_build(monkeypatch, gil_disabled=False, gil_now=True)
    gil_key = _jit.cache_key(info, Backend.CPU, _jit.python_tag())
    assert len(keys) == 1
    assert gil_key not in keys


def test_no_shipped_code_reads_the_runtime_gil_state() -> None:
    """The one function in naming decides; nothing shipped asks ``sys._is_gil_enabled``
    (the selector, the JIT, the build backend, the diagnostics), nor ``sys.abiflags``,
    except the import's common path: ``_loader`` restates the core without importing it,
    and reads the build's abiflags where sysconfig would cost ~1 ms (pinned to the core's
    answer in tests/unit/test_common_path.py)."""
    loader = Path("python", "torch_c_dlpack_ext", "_loader.py")
    offenders = []
    for folder in ("python", "build_backend"):
        for path in (ROOT / folder).rglob("*.py"):
            banned = ("_is_gil_enabled",) if path.relative_to(ROOT) == loader else (
                "_is_gil_enabled", "abiflags"
            )  # fmt: skip
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                name = getattr(node, "attr", None) or getattr(node, "value", None)
                if name in banned:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


def test_one_function_reads_the_build_flag() -> None:
    """``Py_GIL_DISABLED`` of the running interpreter is read in one place,
    :func:`naming.free_threaded_build`; everything else asks it. (``headers.py`` reads the
    flag from a target's ``pyconfig.h``, which is another interpreter's build. ``_loader``,
    the import's common path, imports nothing of the core and restates it; the restatement
    is pinned to the core's in tests/unit/test_common_path.py.)"""
    readers = [
        str(path.relative_to(ROOT))
        for folder in ("python", "build_backend")
        for path in (ROOT / folder).rglob("*.py")
        if 'get_config_var("Py_GIL_DISABLED")' in path.read_text(encoding="utf-8")
    ]
    assert sorted(readers) == [
        "python/_torch_c_dlpack_ext_core/naming.py",
        "python/torch_c_dlpack_ext/_loader.py",
    ]


@pytest.mark.skipif(not FREE_THREADED, reason="no free-threaded CPython in the dev cache")
def test_a_real_free_threaded_python_with_the_gil_enabled_keeps_its_tag() -> None:
    python = FREE_THREADED[0]
    code = (
        "import sys; from torch_c_dlpack_ext._jit import python_tag; "
        "print(python_tag(), sys._is_gil_enabled())"
    )
    env = {
        **os.environ,
        "PYTHON_GIL": "1",
        "PYTHONPATH": str(ROOT / "python"),
        "TORCH_C_DLPACK_EXT_DISABLE": "1",
    }
    proc = subprocess.run(
        [str(python), "-c", code], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    minor = python.name.removeprefix("python").removesuffix("t").replace(".", "")
    assert proc.stdout.split() == [f"cp{minor}t", "True"]
