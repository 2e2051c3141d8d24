"""The Quick start's warning against ``pip install dist/*.whl`` (CONTRIBUTING.md), checked
against each pip it quotes.

For every "pip X and Y say `<message>`" in the Quick start, a fresh venv gets exactly that
pip (from PyPI, through pip's cache) and runs ``pip install --no-index dist/*.whl`` on a
``dist/`` holding a universal wheel and a variant-named one, as ``nox -s build`` leaves
it: the command must fail, install nothing, and print the quoted message (``...`` in the
quote stands for any text).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import build_backend
import pytest
from tests.helpers import clean_env
from tests.unit.test_readme_recipes import QUOTED, quick_start

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform.startswith("win"), reason="POSIX venv layout"),
]

QUOTES = QUOTED.findall(" ".join(quick_start().split()))
PIPS = [(version, message) for versions, message in QUOTES for version in versions.split(" and ")]


def _run(cmd: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    # Isolated from this machine's pip settings (its extra wheel folders and indexes).
    environ = {k: v for k, v in clean_env().items() if not k.startswith("PIP_")}
    environ.update(PIP_DISABLE_PIP_VERSION_CHECK="1", **env)
    return subprocess.run(
        cmd, cwd=cwd, env=environ, capture_output=True, text=True, timeout=600, check=False
    )


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("pip-errors")
    out = work / "dist"
    universal = out / build_backend.build_wheel(str(out), {"universal": "true"})
    # The name `nox -s build` gives a variant wheel: the abi3 tag, then the label.
    variant = universal.name.replace("-py3-none-any.whl", "-cp39-abi3-linux_x86_64-t28_cpu.whl")
    shutil.copyfile(universal, out / variant)
    return work


def test_the_quick_start_quotes_two_pips() -> None:
    assert len(QUOTES) == 2, QUOTES
    assert {version for version, _ in PIPS} >= {"23.0.1", "26.3"}


@pytest.mark.parametrize(("version", "message"), PIPS, ids=[v for v, _ in PIPS])
def test_each_pip_says_what_the_quick_start_quotes(
    dist: Path, tmp_path: Path, version: str, message: str
) -> None:
    venv = tmp_path / "venv"
    made = _run([sys.executable, "-m", "venv", str(venv)], tmp_path)
    assert made.returncode == 0, made.stderr
    pip = venv / "bin" / "pip"
    got = _run([str(pip), "install", "--isolated", f"pip=={version}"], tmp_path)
    assert got.returncode == 0, got.stdout + got.stderr
    assert _run([str(pip), "--version"], tmp_path).stdout.startswith(f"pip {version} ")

    proc = _run(
        ["bash", "-c", f"{pip} install --no-index dist/*.whl"], dist, PIP_CONFIG_FILE="/dev/null"
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    pattern = ".*?".join(re.escape(part) for part in message.split("..."))
    assert re.search(pattern, output), f"pip {version} said:\n{output}"
    listed = _run([str(pip), "list", "--format=freeze"], tmp_path).stdout
    assert "torch-c-dlpack-ext" not in listed.lower().replace("_", "-")
