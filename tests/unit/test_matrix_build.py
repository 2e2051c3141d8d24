"""`nox -s build`'s cell planning: which cells this host builds and why others are skipped."""

from __future__ import annotations

import dataclasses
import socket
from pathlib import Path

import pytest
from devtools import build
from devtools.matrix import load_matrix

MATRIX = load_matrix()


def _cell(cell_id: str):  # type: ignore[no-untyped-def]
    (cell,) = MATRIX.select([cell_id])
    return cell


@pytest.fixture(autouse=True)
def _fresh_index_cache() -> None:
    build._INDEX_CACHE.clear()


def test_other_platform_is_skipped_with_the_reason() -> None:
    reason = build.skip_reason(_cell("cp311-win_amd64-t28_cpu"), "linux_x86_64")
    assert reason == "builds on win_amd64, this host is linux_x86_64"


def test_python_outside_requires_python() -> None:
    # The matrix yields no cp38 cell (requires-python >= 3.9); the build still refuses
    # one made by hand.
    assert "3.8" not in MATRIX.pythons()
    cell = dataclasses.replace(_cell("cp39-linux_x86_64-t24_cpu"), python="3.8")
    reason = build.skip_reason(cell, "linux_x86_64")
    assert reason is not None
    assert "Python 3.8 is outside requires-python >=3.9" in reason


def test_rocm_without_toolchain(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ROCM_PATH", str(tmp_path))  # exists, but holds no include/hip
    monkeypatch.delenv("ROCM_HOME", raising=False)
    if Path("/opt/rocm/include/hip").is_dir():
        pytest.skip("this machine has ROCm in /opt/rocm")
    reason = build.skip_reason(_cell("cp311-linux_x86_64-t28_rocm"), "linux_x86_64")
    assert reason is not None
    assert reason.startswith("no ROCm toolchain")
    (tmp_path / "include" / "hip").mkdir(parents=True)
    assert build._rocm_missing() is None


def test_unreachable_index_is_checked_not_assumed() -> None:
    # A port nothing listens on: refused at once, well within the timeout.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cell = _cell("cp311-linux_x86_64-t26_cpu_abi1")
    wheel = dataclasses.replace(cell.wheel, index_url=f"http://127.0.0.1:{port}/whl")
    reason = build.skip_reason(dataclasses.replace(cell, wheel=wheel), "linux_x86_64")
    assert reason is not None
    assert reason.startswith(f"index http://127.0.0.1:{port}/whl unreachable within 5 s")


def test_host_platform_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build.sys, "platform", "linux")
    monkeypatch.setattr(build.host_platform, "machine", lambda: "aarch64")
    assert build.host_platform_name(MATRIX) == "linux_aarch64"
    monkeypatch.setattr(build.sys, "platform", "darwin")
    monkeypatch.setattr(build.host_platform, "machine", lambda: "arm64")
    assert build.host_platform_name(MATRIX) == "macosx_11_0_arm64"
    monkeypatch.setattr(build.host_platform, "machine", lambda: "x86_64")
    assert build.host_platform_name(MATRIX) is None


def test_bad_jobs_value_is_a_config_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert build.main(["--jobs", "0", "--no-assemble"]) == 2
    assert "--jobs 0: must be 1 or more" in capsys.readouterr().err


def test_unknown_cell_pattern(capsys: pytest.CaptureFixture[str]) -> None:
    assert build.main(["--cells", "cp311-linux_x86_64-t28_cdua", "--no-assemble"]) == 2
    assert "did you mean" in capsys.readouterr().err
