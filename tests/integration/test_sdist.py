"""The sdist through real pip: it compiles against the torch of the build environment
(never importing it) and yields a correctly tagged platform wheel; without torch it
fails with the fix, and leaves no wheel behind.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import zipfile
from pathlib import Path

import build_backend
import pytest
from build_backend import _boundary
from tests.helpers import clean_env

pytestmark = pytest.mark.slow

if not (sys.platform.startswith("linux") and platform.machine() == "x86_64"):
    pytest.skip("uses PyPI's linux_x86_64 torch 2.8.0", allow_module_level=True)

#: What `pip install --no-build-isolation` needs in the environment besides torch.
BUILD_REQUIREMENTS = tuple(
    req for module, req in _boundary.BUILD_REQUIREMENTS.items() if module != "tomli"
)


def _run(cmd: list[str], *, ok: bool = True, **env: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        cmd, env=clean_env(**env), capture_output=True, text=True, timeout=1800, check=False
    )
    if ok:
        assert proc.returncode == 0, f"{cmd}:\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def sdist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sdist")
    return out / build_backend.build_sdist(str(out))


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The build requirements as wheels, so every pip below runs with --no-index."""
    house = tmp_path_factory.mktemp("wheelhouse")
    _run([sys.executable, "-m", "pip", "download", "--isolated", "--only-binary", ":all:",
          "-d", str(house), *BUILD_REQUIREMENTS])  # fmt: skip
    return house


def _venv(path: Path, wheelhouse: Path, *, torch: str | None) -> Path:
    """A pip-enabled venv with the build requirements and, optionally, PyPI's torch."""
    _run([sys.executable, "-m", "venv", str(path)])
    python = path / "bin" / "python"
    _run([str(python), "-m", "pip", "install", "--isolated", "--no-index", "--find-links",
          str(wheelhouse), *BUILD_REQUIREMENTS])  # fmt: skip
    if torch is not None:
        from devtools.base.steps import find_uv

        # torch --no-deps: compiling needs its files only (uv's cache makes this quick).
        _run([find_uv(), "pip", "install", "--python", str(python), "--no-deps", f"torch=={torch}"])
    return python


def test_sdist_builds_a_platform_wheel_against_the_envs_torch(
    sdist: Path, wheelhouse: Path, tmp_path: Path
) -> None:
    python = _venv(tmp_path / "venv", wheelhouse, torch="2.8.0")
    out = tmp_path / "wheels"
    # backends=cpu bounds the test to one compile; the default also builds the GPU
    # library when the torch has one and the toolkit headers are present.
    _run([str(python), "-m", "pip", "wheel", "--isolated", "--no-index", "--find-links",
          str(wheelhouse), "--no-build-isolation", "--no-deps", "-C", "backends=cpu",
          "-w", str(out), str(sdist)])  # fmt: skip
    (wheel,) = out.glob("*.whl")
    # A CPython with the GIL builds the limited API library: one wheel for every CPython.
    assert wheel.name == "torch_c_dlpack_ext-0.2.0-cp39-abi3-linux_x86_64.whl"
    with zipfile.ZipFile(wheel) as archive:
        manifest = json.loads(archive.read("torch_c_dlpack_ext/manifest.json"))
        # The env's torch, and the portable table (a C compiler is there; no torch).
        entries = {e["torch"]: e for e in manifest["libraries"]}
        assert sorted(entries) == ["2.8", "any"]
        portable = entries["any"]
        assert portable["file"] == "libs/libtorch_c_dlpack_ext-portable.so"
        assert (portable["backend"], portable["python"]) == ("any", "abi3")
        entry = entries["2.8"]
        assert entry["file"] == "libs/libtorch_c_dlpack_ext-torch2.8-cpu-cxx11abi1.so"
        assert entry["torch_build"].startswith("2.8.0")
        assert entry["python"] == "abi3"
        assert (
            "Root-Is-Purelib: false"
            in archive.read("torch_c_dlpack_ext-0.2.0.dist-info/WHEEL").decode()
        )
        assert "torch_c_dlpack_ext/csrc/exchange_api.cc" in archive.namelist()
        assert "torch_c_dlpack_ext/csrc/portable/export.c" in archive.namelist()
    # The build never imported torch: its modules would have needed numpy & co here.
    _run([str(python), "-m", "pip", "install", "--isolated", "--no-index", "--no-deps", str(wheel)])


@pytest.mark.parametrize("isolation", [True, False], ids=["isolated", "no-build-isolation"])
def test_sdist_without_torch_fails_with_the_fix(
    sdist: Path, wheelhouse: Path, tmp_path: Path, isolation: bool
) -> None:
    python = _venv(tmp_path / "venv", wheelhouse, torch=None)
    out = tmp_path / "wheels"
    flags = [] if isolation else ["--no-build-isolation"]
    proc = _run(
        [str(python), "-m", "pip", "wheel", "--isolated", "--no-index", "--find-links",
         str(wheelhouse), *flags, "--no-deps", "-w", str(out), str(sdist)],
        ok=False,
        TMPDIR=str(tmp_path),  # where the failed build's traceback file goes
    )  # fmt: skip
    assert proc.returncode != 0
    output = proc.stdout + proc.stderr
    # One paragraph from the backend's error boundary, not a traceback.
    assert "Traceback" not in output, output
    assert "torch-c-dlpack-ext cannot be built: building torch-c-dlpack-ext from source" in output
    assert "pip install --no-build-isolation torch-c-dlpack-ext" in output
    assert f"(full traceback: {tmp_path}/torch-c-dlpack-ext-build-error-" in output
    assert not out.exists() or not list(out.glob("*.whl"))
