"""`nox -s build`'s cell planning: which cells this host builds and why others are skipped."""

from __future__ import annotations

import dataclasses
import socket
from pathlib import Path

import pytest
from devtools.base import cli
from devtools.build import host as buildhost
from devtools.matrix.reader import load_matrix

MATRIX = load_matrix()


def _cell(cell_id: str):  # type: ignore[no-untyped-def]
    (cell,) = MATRIX.select([cell_id])
    return cell


@pytest.fixture(autouse=True)
def _fresh_index_cache() -> None:
    buildhost._INDEX_CACHE.clear()


def test_other_platform_is_skipped_with_the_reason() -> None:
    reason = buildhost.skip_reason(_cell("win_amd64-t28_cpu"), "linux_x86_64")
    assert reason == "builds on win_amd64, this host is linux_x86_64"


def test_free_threaded_cell_without_its_interpreter_is_skipped_with_the_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    buildhost.freethreaded_python.cache_clear()
    monkeypatch.setattr(
        buildhost, "freethreaded_python", lambda version: f"no free-threaded CPython {version}: x"
    )
    reason = buildhost.skip_reason(_cell("linux_x86_64-t29_cpu-cp314t"), "linux_x86_64")
    assert reason == "no free-threaded CPython 3.14t: x"


def test_free_threaded_python_is_this_one_or_the_provisioners(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import importlib
    import sys
    import types

    buildhost.freethreaded_python.cache_clear()
    monkeypatch.setattr(buildhost, "running_python", lambda: "3.14t")
    found = buildhost.freethreaded_python("3.14t")
    assert isinstance(found, buildhost.Interpreter)
    assert found.executable == Path(sys.executable)
    # Another one: from devtools.envs.freethreaded when it provides it, else the reason.
    provisioner = types.SimpleNamespace(
        free_threaded_python=lambda version: types.SimpleNamespace(
            executable=tmp_path / f"python{version}", include_dir=tmp_path / "include"
        )
    )
    real = importlib.import_module
    monkeypatch.setattr(
        importlib,
        "import_module",
        lambda name, *a: provisioner if name == "devtools.envs.freethreaded" else real(name, *a),
    )
    buildhost.freethreaded_python.cache_clear()
    assert buildhost.freethreaded_python("3.13t") == buildhost.Interpreter(
        tmp_path / "python3.13t", tmp_path / "include"
    )

    def missing(name: str, *a: object) -> object:
        if name == "devtools.envs.freethreaded":
            raise ImportError(name)
        return real(name, *a)

    monkeypatch.setattr(importlib, "import_module", missing)
    buildhost.freethreaded_python.cache_clear()
    reason = buildhost.freethreaded_python("3.13t")
    assert isinstance(reason, str)
    assert reason.startswith("no free-threaded CPython 3.13t here")
    buildhost.freethreaded_python.cache_clear()


def test_abi3_cell_on_a_free_threaded_interpreter_is_skipped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(buildhost, "running_python", lambda: "3.14t")
    monkeypatch.setattr(
        buildhost.sysconfig, "get_config_var", lambda name: 1 if name == "Py_GIL_DISABLED" else None
    )
    reason = buildhost.skip_reason(_cell("linux_x86_64-t28_cpu"), "linux_x86_64")
    assert reason is not None
    assert "an abi3 library compiles against a CPython with the GIL" in reason


def test_tree_python_prefers_the_running_one() -> None:
    cell = _cell("linux_x86_64-t29_cpu")
    running = buildhost.running_python()
    expected = running if running in cell.pythons else "3.14"
    assert buildhost.tree_python(cell) == expected
    old = dataclasses.replace(cell, pythons=("3.9", "3.10"))
    assert buildhost.tree_python(old) == (running if running in old.pythons else "3.10")


def test_rocm_without_toolchain(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ROCM_PATH", str(tmp_path))  # exists, but holds no include/hip
    monkeypatch.delenv("ROCM_HOME", raising=False)
    if Path("/opt/rocm/include/hip").is_dir():
        pytest.skip("this machine has ROCm in /opt/rocm")
    reason = buildhost.skip_reason(_cell("linux_x86_64-t28_rocm"), "linux_x86_64")
    assert reason is not None
    assert reason.startswith("no ROCm toolchain")
    (tmp_path / "include" / "hip").mkdir(parents=True)
    assert buildhost._rocm_missing() is None


def test_unreachable_index_is_checked_not_assumed() -> None:
    # A port nothing listens on: refused at once, well within the timeout.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cell = _cell("linux_x86_64-t26_cpu_abi1")
    wheel = dataclasses.replace(cell.wheel, index_url=f"http://127.0.0.1:{port}/whl")
    reason = buildhost.skip_reason(dataclasses.replace(cell, wheel=wheel), "linux_x86_64")
    assert reason is not None
    assert reason.startswith(f"index http://127.0.0.1:{port}/whl unreachable within 5 s")


def test_host_platform_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(buildhost.sys, "platform", "linux")
    monkeypatch.setattr(buildhost.host_platform, "machine", lambda: "aarch64")
    assert buildhost.host_platform_name(MATRIX) == "linux_aarch64"
    monkeypatch.setattr(buildhost.sys, "platform", "darwin")
    monkeypatch.setattr(buildhost.host_platform, "machine", lambda: "arm64")
    assert buildhost.host_platform_name(MATRIX) == "macosx_11_0_arm64"
    monkeypatch.setattr(buildhost.host_platform, "machine", lambda: "x86_64")
    assert buildhost.host_platform_name(MATRIX) is None


def test_bad_jobs_value_is_a_config_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["build", "--jobs", "0", "--no-assemble"]) == 2
    assert "--jobs 0: must be 1 or more" in capsys.readouterr().err


def test_unknown_cell_pattern(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["build", "--cells", "linux_x86_64-t28_cdua", "--no-assemble"]) == 2
    assert "did you mean" in capsys.readouterr().err
