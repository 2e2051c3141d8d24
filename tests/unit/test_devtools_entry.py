"""``python -m devtools`` from the repository root, as CONTRIBUTING and docs/ print it:
no ``PYTHONPATH``, and the checkout's core even where another copy is importable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import ROOT


def _bare_env(**extra: str) -> dict[str, str]:
    """The environment of a new shell: no PYTHONPATH, none of this project's variables."""
    keep = ("PATH", "HOME", "LANG", "TMPDIR", "SYSTEMROOT")
    return {**{k: os.environ[k] for k in keep if k in os.environ}, **extra}


def _devtools(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "devtools", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_help_works_from_the_root_without_pythonpath() -> None:
    proc = _devtools("--help", env=_bare_env())
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout.startswith("usage: python -m devtools")
    assert "build" in proc.stdout


def test_a_command_runs_from_the_root_without_pythonpath() -> None:
    proc = _devtools("build", "--help", env=_bare_env())
    assert proc.returncode == 0, proc.stderr
    assert "--cells" in proc.stdout


def test_the_checkouts_core_wins_over_another_copy_on_the_path(tmp_path: Path) -> None:
    # An installed torch-c-dlpack-ext wheel carries _torch_c_dlpack_ext_core too (maybe of
    # another version): the tools must never run on it.
    other = tmp_path / "site" / "_torch_c_dlpack_ext_core"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text("raise SystemExit('the other copy was imported')\n")
    proc = _devtools("--help", env=_bare_env(PYTHONPATH=str(tmp_path / "site")))
    assert proc.returncode == 0, proc.stderr
    assert "the other copy" not in proc.stderr
