"""Issue 21 item 17: ``python -m torch_c_dlpack_ext`` prints its report without the import's
warning repeated above it (``<frozen runpy>:...: TorchCDLPackExtWarning``), while a plain
import still warns; and messages keep names spelled in lower case ("torch is not
importable", not "Torch is not importable")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from torch_c_dlpack_ext._wording import sentence as _sentence

ROOT = Path(__file__).resolve().parents[2]
NUMPY = "ignore:Failed to initialize NumPy"  # torch 2.13 without numpy says so at import


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    pytest.importorskip("torch")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_C_DLPACK_EXT_")}
    # The source tree has no manifest: with FORCE=1 nothing can be published, so the
    # import has something to say.
    env.update(PYTHONPATH=str(ROOT / "python"), TORCH_C_DLPACK_EXT_FORCE="1")
    return subprocess.run(
        [sys.executable, "-W", NUMPY, *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_diagnostics_do_not_repeat_the_warning() -> None:
    proc = _run("-m", "torch_c_dlpack_ext")
    assert proc.returncode == 1, proc.stderr[-2000:]  # nothing published
    assert "TorchCDLPackExtWarning" not in proc.stderr, proc.stderr[-2000:]
    assert "no usable manifest" in proc.stdout, proc.stdout


def test_a_plain_import_still_warns() -> None:
    proc = _run("-c", "import torch, torch_c_dlpack_ext")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "TorchCDLPackExtWarning: torch-c-dlpack-ext: No usable manifest" in proc.stderr


def test_names_in_lower_case_stay_so() -> None:
    assert _sentence("torch is not importable (ImportError: x)") == (
        "torch is not importable (ImportError: x)."
    )
    assert _sentence("torch's legacy int is unusable") == "torch's legacy int is unusable."
    assert _sentence("no usable manifest") == "No usable manifest."
    assert _sentence("torch.Tensor.__x__ is 5") == "torch.Tensor.__x__ is 5."
