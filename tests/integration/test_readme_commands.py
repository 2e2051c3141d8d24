"""The install commands of README (the user's page) and of CONTRIBUTING.md's Quick start,
run as written in a fresh virtual environment.

README's "Installing from source" runs with three substitutions, all asserted: the torch release
is the one this test session runs (2.13, which pip installs from this machine's wheel
cache instead of downloading torch 2.8 and its CUDA wheels), the CUDA header line is left
out (that torch is a CPU build), and the project comes from an sdist of this checkout
instead of the index. (``test_readme_source_install.py`` runs the block verbatim against a
local index.) CONTRIBUTING.md's Quick start's
"install what ``nox -s build`` made" commands then run verbatim in the same venv
against a ``dist/`` holding a universal wheel, a variant-named wheel and the sdist.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import build_backend
import pytest
from tests.helpers import clean_env

torch = pytest.importorskip("torch")
if sys.platform.startswith("win"):
    pytest.skip("README's commands are POSIX shell (venv/bin/activate)", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
CONTRIBUTING = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
TORCH_RELEASE = torch.__version__.split("+")[0]
#: The ``progress`` fixture of tests/conftest.py: a line to the terminal, past capture.
Progress = Callable[[str], None]


def code_blocks(section: str, page: str = README) -> list[str]:
    """The ```bash blocks of the section of ``page`` (README by default) whose heading is
    ``section``."""
    start = page.index(section)
    body = page[start + len(section) :]
    end = re.search(r"^#{2,3} ", body, re.M)
    body = body[: end.start()] if end else body
    return re.findall(r"```bash\n(.*?)```", body, re.S)


def bash(
    script: str, cwd: Path, what: str, timeout: float, progress: Progress
) -> subprocess.CompletedProcess[str]:
    """Run ``script`` with ``bash -eu`` (each line must succeed), telling the terminal
    what is running: the source install takes a minute or more."""
    progress(f"[readme] {what} ...")
    started = time.monotonic()
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd,
        env=clean_env(PIP_DISABLE_PIP_VERSION_CHECK="1"),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    progress(f"[readme] {what}: exit {proc.returncode} in {time.monotonic() - started:.0f} s")
    return proc


@pytest.fixture(scope="module")
def source_install(
    tmp_path_factory: pytest.TempPathFactory, progress: Progress
) -> tuple[Path, str]:
    """The "Installing from source" block run in a fresh directory; (dir, output)."""
    (block,) = code_blocks("### Installing from source")
    from _torch_c_dlpack_ext_core.installsource import pinned_requirement

    lines = [line for line in block.splitlines() if line.strip()]
    assert lines[0] == "python3 -m venv venv && . venv/bin/activate", lines
    assert "pip install torch==2.8.0 " in lines[1], lines
    assert lines[2] == 'pip install "nvidia-cuda-nvcc-cu12==12.8.*"', lines
    assert lines[-1].endswith(f" {pinned_requirement()}"), lines
    work = tmp_path_factory.mktemp("readme")
    sdist = Path(build_backend.build_sdist(str(work / "sdist")))
    lines[1] = lines[1].replace("torch==2.8.0", f"torch=={TORCH_RELEASE}")
    del lines[2]
    lines[-1] = lines[-1].removesuffix(pinned_requirement()) + str(work / "sdist" / sdist.name)
    what = f"Installing from source (torch {TORCH_RELEASE})"
    proc = bash("\n".join(lines), work, what, 1500, progress)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return work, proc.stdout + proc.stderr


def diagnose(work: Path) -> dict[str, object]:
    proc = subprocess.run(
        [str(work / "venv" / "bin" / "python"), "-m", "torch_c_dlpack_ext", "--json"],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    report: dict[str, object] = json.loads(proc.stdout)
    return report


@pytest.mark.slow
def test_installing_from_source_works_as_written(source_install: tuple[Path, str]) -> None:
    work, output = source_install
    assert "Successfully installed torch-c-dlpack-ext" in output
    report = diagnose(work)
    assert str(report["package"]["path"]).startswith(str(work / "venv"))  # type: ignore[index]
    bundled = report["bundled"]
    assert isinstance(bundled, list), bundled
    minor = ".".join(TORCH_RELEASE.split(".")[:2])
    # The build environment's torch, and the portable table (a C compiler is there).
    assert sorted((e["torch"], e["backend"]) for e in bundled) == [(minor, "cpu"), ("any", "any")]
    # torch 2.13 has the API itself: the library built from source is not needed.
    assert report["decision"]["kind"] == "defer"  # type: ignore[index]
    assert report["smoke_test"]["ok"]  # type: ignore[index]


@pytest.mark.slow
def test_installing_from_dist_works_as_written(
    source_install: tuple[Path, str], progress: Progress
) -> None:
    work, _ = source_install
    blocks = code_blocks("## Quick start", CONTRIBUTING)
    install = next(b for b in blocks if "--find-links dist" in b)
    dist = work / "dist"
    dist.mkdir()
    universal = Path(build_backend.build_wheel(str(dist), {"universal": "true"}))
    # A PEP 825 variant wheel's name (a label after the platform tag): pip rejects it.
    version = universal.name.split("-")[1]
    variant = f"torch_c_dlpack_ext-{version}-cp39-abi3-linux_x86_64-t28_cpu.whl"
    shutil.copyfile(dist / universal.name, dist / variant)
    shutil.copytree(work / "sdist", dist, dirs_exist_ok=True)

    activate = ". venv/bin/activate\n"
    uninstall = bash(
        activate + "pip uninstall -y torch-c-dlpack-ext", work, "uninstall", 300, progress
    )
    assert uninstall.returncode == 0, uninstall.stderr
    glob = bash(activate + "pip install dist/*.whl", work, "pip install dist/*.whl", 300, progress)
    assert glob.returncode != 0, "the Quick start says the glob fails; it worked"
    rejected = glob.stdout + glob.stderr
    assert "t28_cpu" in rejected
    assert "Invalid build number" in rejected or "not a valid wheel filename" in rejected

    proc = bash(
        activate + install, work, "install from dist/ as the Quick start says", 600, progress
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "Successfully installed torch-c-dlpack-ext" in proc.stdout
    report = diagnose(work)
    assert report["decision"]["kind"] == "defer"  # type: ignore[index]
    # The wheel pip chose among the three candidates: the only installable wheel.
    record = next((work / "venv").glob("lib/python3*/site-packages/torch_c_dlpack_ext-*.dist-info"))
    assert (record / "WHEEL").read_text(encoding="utf-8").count("Tag: py3-none-any") == 1
