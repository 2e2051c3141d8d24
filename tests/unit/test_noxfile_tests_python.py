"""``nox -s tests`` on the oldest Python the Quick start promises (3.9): the session runs under a
Python that its torch has wheels for (:func:`noxfile.python_for_tests`), and says so."""

from __future__ import annotations

import functools
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("nox")


@functools.cache
def _noxfile() -> ModuleType:
    """The noxfile as a module, loaded once; the sessions it registers are dropped again
    (nox keeps one registry per process)."""
    import nox.registry

    before = nox.registry.get()
    spec = importlib.util.spec_from_file_location("noxfile_under_test", ROOT / "noxfile.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    finally:
        nox.registry.reset()
        nox.registry._REGISTRY.update(before)
    return module


def _on_path(*versions: str) -> object:
    return lambda name: name.removeprefix("python") in versions


@pytest.mark.parametrize(
    ("running", "on_path", "chosen"),
    [
        ((3, 9), ("3.10", "3.12"), "3.12"),  # the newest there is
        ((3, 9), ("3.10",), "3.10"),
        ((3, 9), ("3.14", "3.13"), "3.14"),
        ((3, 9), (), None),  # none: the session stops, saying why
        ((3, 9), ("3.9", "3.8"), None),  # too old
        ((3, 10), ("3.13",), None),  # nox's own Python will do
        ((3, 11), (), None),
        ((3, 14), (), None),
    ],
)
def test_the_tests_python(
    running: tuple[int, int], on_path: tuple[str, ...], chosen: str | None
) -> None:
    noxfile = _noxfile()
    assert noxfile.python_for_tests(running, _on_path(*on_path)) == chosen


def test_a_python_on_path_that_does_not_run_is_not_chosen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A pyenv shim of a version pyenv has not selected: on PATH, but it only fails.
    shim = tmp_path / "python3.13"
    shim.write_text("#!/bin/sh\necho 'pyenv: python3.13: command not found' >&2\nexit 127\n")
    shim.chmod(0o755)
    works = tmp_path / "python3.12"
    works.symlink_to(sys.executable)
    monkeypatch.setenv("PATH", str(tmp_path))
    noxfile = _noxfile()
    assert noxfile.python_for_tests((3, 9)) == "3.12"


def test_the_floor_is_the_tested_torchs() -> None:
    # torch 2.13.0 has cp310 wheels and none for cp39 (checked on PyPI, 2026-12-03).
    noxfile = _noxfile()
    assert noxfile.TESTS_TORCH == "torch==2.13.0"
    assert noxfile.TESTS_MIN_PYTHON == (3, 10)
    assert noxfile.TESTS_PYTHON_CANDIDATES[-1] == "3.10"


def test_the_session_is_still_called_tests_under_an_old_python(tmp_path: Path) -> None:
    # What nox registers when the noxfile is loaded by a Python older than the floor:
    # the Quick start's `nox -s tests` must still name it.
    code = (
        "import sys, shutil, runpy, nox, nox.registry;"
        "sys.version_info = (3, 9, 18, 'final', 0);"
        "shutil.which = lambda name, *a, **k: sys.executable if name == 'python3.12' else None;"
        f"runpy.run_path({str(ROOT / 'noxfile.py')!r});"
        "sessions = nox.registry.get();"
        "print(sessions['tests'].python, sessions['bench'].python)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["3.12", "3.12"]  # bench installs torch 2.13 too
