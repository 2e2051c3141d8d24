"""torch's own import fails (issue 31, item 4): the package imports torch at most once, says
that it was torch's own import that failed and why, and never touches a half-initialised
torch. Under ``-W error`` a warning torch emits while importing (the real torch 2.13 warns
when numpy is missing) becomes an exception: importing the half-loaded torch again used to
fail differently each time, and the process crashed at exit (exit 139)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from tests.helpers import clean_env, make_package, run_python

#: A stand-in torch whose import counts itself, leaves a submodule behind (as the real
#: torch leaves torch._C), then warns: under -W error its import fails as the real one does.
FAKE_TORCH_INIT = """
import os, warnings
with open(os.environ["FAKE_TORCH_COUNT"], "a") as count:
    count.write("x")
import torch._C
warnings.warn("fake torch: Failed to initialize NumPy (a test stand-in)")
"""


@pytest.fixture
def warning_torch(tmp_path: Path) -> tuple[Path, Path]:
    """A directory holding the fake torch, and the file its imports are counted in."""
    root = tmp_path / "faketorch"
    (root / "torch").mkdir(parents=True)
    (root / "torch" / "__init__.py").write_text(FAKE_TORCH_INIT, encoding="utf-8")
    (root / "torch" / "_C.py").write_text("", encoding="utf-8")
    return root, tmp_path / "count"


def _run(
    code: str, paths: list[Path], count: Path, *flags: str
) -> subprocess.CompletedProcess[str]:
    env = clean_env(FAKE_TORCH_COUNT=str(count), PYTHONPATH=":".join(map(str, paths)))
    return subprocess.run(
        [sys.executable, *flags, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


IMPORT = """
try:
    import torch_c_dlpack_ext
except ImportError as exc:
    print(type(exc).__name__, isinstance(exc, ImportError))
    print(exc)
"""


def test_torch_is_imported_once_and_its_own_failure_is_named(
    tmp_path: Path, warning_torch: tuple[Path, Path]
) -> None:
    fake, count = warning_torch
    root = make_package(tmp_path / "pkg", manifest=False)
    proc = _run(IMPORT, [root, fake], count, "-W", "error")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert count.read_text() == "x", "torch was imported more than once"
    first, _, message = proc.stdout.partition("\n")
    assert first == "WarningAsImportError True", proc.stdout
    assert "torch's own import failed" in message, message
    assert "UserWarning" in message, message
    assert "turned into an error" in message, message
    assert "fake torch: Failed to initialize NumPy" in message, message
    assert "Install torch" not in message, message
    assert "not importable" not in message, message


def test_a_torch_left_half_imported_is_not_imported_again(
    tmp_path: Path, warning_torch: tuple[Path, Path]
) -> None:
    fake, count = warning_torch
    root = make_package(tmp_path / "pkg", manifest=False)
    code = (
        "import warnings\ntry:\n    import torch\nexcept UserWarning:\n    pass\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    import torch_c_dlpack_ext\n"
        "print(torch_c_dlpack_ext.status().reason)\n"
    )
    proc = _run(code, [root, fake], count, "-W", "error")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert count.read_text() == "x", "the half-initialised torch was imported again"
    assert "half-initialised" in proc.stdout, proc.stdout


def test_a_torch_still_being_imported_is_not_touched(tmp_path: Path) -> None:
    fake = tmp_path / "faketorch"
    (fake / "torch").mkdir(parents=True)
    (fake / "torch" / "__init__.py").write_text(
        "import warnings\nwith warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    import torch_c_dlpack_ext\n"
        "print([str(w.message) for w in caught])\n",
        encoding="utf-8",
    )
    root = make_package(tmp_path / "pkg", manifest=False)
    proc = run_python("import torch", pythonpath=[root, fake], timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "torch is still being imported" in proc.stdout, proc.stdout
    assert "after torch's import has finished" in proc.stdout, proc.stdout


def _numpy_missing() -> bool:
    return importlib.util.find_spec("numpy") is None


@pytest.mark.skipif(not _numpy_missing(), reason="the real torch warns only without numpy")
@pytest.mark.parametrize("diagnostics", [False, True], ids=["import", "diagnostics"])
def test_real_torch_warning_under_w_error_is_reported_without_a_crash(
    tmp_path: Path, diagnostics: bool
) -> None:
    pytest.importorskip("torch")
    root = make_package(tmp_path / "pkg", manifest=False)
    args = ["-W", "error", *(["-m", "torch_c_dlpack_ext"] if diagnostics else ["-c", IMPORT])]
    proc = subprocess.run(
        [sys.executable, *args],
        env=clean_env(PYTHONPATH=str(root)),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    # 139 / -11 was the crash at exit after importing the half-loaded torch 3-4 times.
    assert proc.returncode == (1 if diagnostics else 0), (proc.returncode, proc.stderr[-3000:])
    out = proc.stdout
    assert "torch's own import failed" in out, out
    assert "Failed to initialize NumPy" in out, out
    if not diagnostics:
        assert out.startswith("WarningAsImportError True"), out
