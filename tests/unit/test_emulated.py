"""`nox -s emulated`'s planning and verdicts, without qemu: which wheel and minors it takes,
what a host that cannot emulate is told (exit 14), and the one table and exit status."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from devtools.base import cli
from devtools.base.errors import EmulationUnavailableError
from devtools.envs import emulated, emulation
from devtools.matrix.reader import load_matrix

from _torch_c_dlpack_ext_core.errors import CommandTimeoutError, ConfigError

MATRIX = load_matrix()
AARCH64 = emulation.EMULATED["linux_aarch64"]


def test_combined_wheel_is_the_abi3_wheel_of_the_platform(tmp_path: Path) -> None:
    names = [
        "torch_c_dlpack_ext-0.2.0-cp39-abi3-manylinux_2_28_x86_64.whl",
        "torch_c_dlpack_ext-0.2.0-cp39-abi3-manylinux_2_34_aarch64-t28_cpu.whl",
        "torch_c_dlpack_ext-0.2.0-cp314-cp314t-manylinux_2_34_aarch64.whl",
        "torch_c_dlpack_ext-0.2.0-py3-none-any.whl",
    ]
    for name in names:
        (tmp_path / name).write_bytes(b"")
    assert emulated.combined_wheel(tmp_path, "linux_aarch64") is None
    combined = tmp_path / "torch_c_dlpack_ext-0.2.0-cp39-abi3-manylinux_2_34_aarch64.whl"
    combined.write_bytes(b"")
    assert emulated.combined_wheel(tmp_path, "linux_aarch64") == combined
    # Read through devtools.base.wheelnames: the platform's family and architecture, whatever
    # glibc floor the repair gave.
    assert emulated.combined_wheel(tmp_path, "linux_x86_64") == tmp_path / names[0]
    assert emulated.combined_wheel(tmp_path, "macosx_11_0_arm64") is None


def test_every_torch_minor_of_the_platform_is_checked() -> None:
    cells = emulated.select_minors(MATRIX, "linux_aarch64", None)
    assert [c.torch.minor for c in cells] == ["2.4", "2.5", "2.6", "2.7", "2.8", "2.9"]
    assert {c.backend.value for c in cells} == {"cpu"}
    assert [c.cxx11_abi for c in cells] == [False, False, True, True, True, True]
    assert [c.torch.minor for c in emulated.select_minors(MATRIX, "linux_aarch64", ["2.9"])] == [
        "2.9"
    ]
    with pytest.raises(ConfigError, match=r"--torch 2\.3: no CPU cell of linux_aarch64"):
        emulated.select_minors(MATRIX, "linux_aarch64", ["2.3"])


def _done(rc: int, out: str = "", err: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess([], rc, out, err)


def test_capture_returns_a_failure_for_the_caller_to_judge() -> None:
    # Through the project's one subprocess helper: no echo, no raise on a non-zero exit.
    proc = emulation.capture([sys.executable, "-c", "import sys; sys.exit('no binfmt')"])
    assert proc.returncode == 1
    assert "no binfmt" in emulation.last_lines(proc)
    assert emulation.capture(["tcde-no-such-program"]).returncode == 127


def test_a_check_that_hangs_in_the_root_is_a_finding(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def hang(cmd: list[str], *, timeout: float) -> subprocess.CompletedProcess[str]:
        raise CommandTimeoutError(cmd, timeout, "half a line", "")

    monkeypatch.setattr(emulation, "capture", hang)
    proc = emulation.in_root(tmp_path, [], ["-c", "pass"], env={}, timeout=5)
    assert (proc.returncode, proc.stdout) == (124, "half a line")
    assert proc.stderr == "timed out after 5 s"


@pytest.fixture
def x86_host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An x86_64 Linux root host whose packages are installed and whose binfmt_misc is
    the folder returned."""
    monkeypatch.setattr(emulation.sys, "platform", "linux")
    monkeypatch.setattr(emulation.host_platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(emulation.os, "geteuid", lambda: 0)
    monkeypatch.setattr(emulation, "_package_installed", lambda name: True)
    binfmt = tmp_path / "binfmt_misc"
    binfmt.mkdir()
    monkeypatch.setattr(emulation, "BINFMT_DIR", binfmt)
    return binfmt


def test_not_root_cannot_emulate(x86_host: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(emulation.os, "geteuid", lambda: 1000)
    with pytest.raises(EmulationUnavailableError, match="needs root") as info:
        emulation.check_host(AARCH64)
    assert info.value.exit_code == 14


def test_no_binfmt_misc_cannot_emulate(x86_host: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []

    def sh(cmd: list[str], timeout: float = 0) -> subprocess.CompletedProcess[str]:
        calls.append(list(cmd))
        return _done(32, err="mount: permission denied")

    monkeypatch.setattr(emulation, "capture", sh)
    with pytest.raises(EmulationUnavailableError, match="binfmt_misc is not mounted and cannot be"):
        emulation.check_host(AARCH64)
    assert calls == [["mount", "-t", "binfmt_misc", "binfmt_misc", str(x86_host)]]


def test_a_handler_without_the_f_flag_is_refused(
    x86_host: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (x86_host / "status").write_text("enabled\n")
    (x86_host / "qemu-aarch64").write_text("enabled\ninterpreter /usr/bin/qemu\nflags: P\n")
    monkeypatch.setattr(emulation, "capture", lambda cmd, timeout=0: _done(0))
    with pytest.raises(EmulationUnavailableError, match="no F flag"):
        emulation.check_host(AARCH64)
    (x86_host / "qemu-aarch64").write_text("enabled\ninterpreter /usr/bin/qemu\nflags: PF\n")
    emulation.check_host(AARCH64)  # registered as qemu-user-static does: usable


def test_main_says_why_in_one_line_and_exits_14(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def refuse(emulation: Any, install: bool = True) -> None:
        raise EmulationUnavailableError("emulation needs root (binfmt_misc, ...); run as root")

    monkeypatch.setattr(emulation, "check_host", refuse)
    assert cli.main(["emulated", "--platform", "linux_aarch64", "--torch", "2.8"]) == 14
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: EmulationUnavailableError: emulation needs root (binfmt_misc, ...); run as root"
    ]


class _NoMount:
    def __init__(self, root: Path) -> None:
        del root

    def __enter__(self) -> _NoMount:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


@pytest.mark.parametrize("failing", [None, "2.5"])
def test_one_row_per_minor_and_exit_0_only_if_every_minor_held(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    failing: str | None,
) -> None:
    seen: list[str] = []

    def check(root: Path, cell: Any, wheel: Path, emulation: Any, **kwargs: Any) -> Any:
        seen.append(cell.torch.minor)
        bad = cell.torch.minor == failing
        return emulated.MinorResult(
            minor=cell.torch.minor,
            torch=cell.torch.release,
            ok=not bad,
            detail="tvm-ffi echo: AssertionError: x" if bad else "decision: load x",
        )

    monkeypatch.setattr(emulation, "check_host", lambda target: None)
    monkeypatch.setattr(emulation, "provision_root", lambda target: tmp_path)
    monkeypatch.setattr(emulated, "ensure_wheel", lambda dist, platform: tmp_path / "x.whl")
    monkeypatch.setattr(emulated, "check_minor", check)
    monkeypatch.setattr(emulation, "Mounted", _NoMount)
    code = cli.main(["emulated", "--platform", "linux_aarch64"])
    assert seen == ["2.4", "2.5", "2.6", "2.7", "2.8", "2.9"]
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("2.")]
    assert len(rows) == 6
    if failing is None:
        assert code == 0
        assert all(" ok " in row for row in rows)
    else:
        assert code == 1
        (bad,) = [row for row in rows if row.startswith(failing)]
        assert "failed" in bad
        assert "tvm-ffi echo: AssertionError: x" in bad
    assert not list((tmp_path / "opt" / "tcde" / "runs").iterdir())  # the run folder is gone


def test_a_minor_whose_wheel_cannot_be_installed_is_a_failed_row(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from devtools.base.errors import ProvisionError

    def refuse(target: Path, emulation: Any, *requirements: str) -> None:
        raise ProvisionError("uv pip install --no-deps x.whl failed: not a supported wheel")

    monkeypatch.setattr(emulated, "minor_env", lambda root, cell, emulation: (tmp_path, False))
    monkeypatch.setattr(emulated, "_uv_target", refuse)
    (cell,) = emulated.select_minors(MATRIX, "linux_aarch64", ["2.4"])
    result = emulated.check_minor(
        tmp_path, cell, tmp_path / "x.whl", AARCH64, examples=0, run_dir=tmp_path
    )
    assert not result.ok
    assert result.detail == (
        "provisioning: uv pip install --no-deps x.whl failed: not a supported wheel"
    )


def _diag(kind: str = "load", minor: int = 4, abi: int = 0, smoke: bool = True) -> str:
    library = f"/opt/tcde/runs/r/pkg-2.4/torch_c_dlpack_ext/libs/libx-torch2.{minor}.so"
    return json.dumps(
        {
            "decision": {"kind": kind, "library": library, "reason": "why not"},
            "build_info": {"torch_major": 2, "torch_minor": minor, "cxx11_abi": abi},
            "smoke_test": {"ok": smoke, "detail": "round trip of a 2x3 float32 cpu tensor"},
        }
    )


_SUMMARY = "conformance: 231 cases in 6 properties (hypothesis profile 'emulated', 9.0 s)"


@pytest.mark.parametrize(
    ("diag", "conformance", "cause"),
    [
        (_diag(), (0, _SUMMARY), None),
        (_diag(kind="defer"), (0, _SUMMARY), "decision defer: why not"),
        (_diag(minor=5), (0, _SUMMARY), "loaded a library for torch 2.5, not 2.4"),
        (_diag(abi=1), (0, _SUMMARY), "loaded cxx11_abi=1, torch uses False"),
        (_diag(smoke=False), (0, _SUMMARY), "round trip: round trip of a 2x3"),
        ("Traceback ...\nImportError: x", (0, _SUMMARY), "python -m torch_c_dlpack_ext --json"),
        (_diag(), (1, "FAILED tests/conformance/test_diff_import.py::t - AssertionError"),
         "conformance exit 1: FAILED tests/conformance/test_diff_import.py::t"),
        (_diag(), (0, "6 skipped in 1.0s"), "conformance ran no case"),
    ],
)  # fmt: skip
def test_check_minor_verdicts(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    diag: str,
    conformance: tuple[int, str],
    cause: str | None,
) -> None:
    def in_root(root: Path, paths: Any, argv: list[str], **kwargs: Any) -> Any:
        if argv[:2] == ["-m", "torch_c_dlpack_ext"]:
            return _done(0 if "decision" in diag else 1, diag, "" if "decision" in diag else diag)
        if argv[:2] == ["-m", "pytest"]:
            # The suite runs against the library the diagnosis says was loaded.
            assert kwargs["env"]["TCDE_TEST_LIBRARY"] == json.loads(diag)["decision"]["library"]
            return _done(conformance[0], conformance[1] + "\n", "")
        return _done(0, "echo ok\n")  # tvm-ffi's echo

    monkeypatch.setattr(emulated, "minor_env", lambda root, cell, emulation: (tmp_path, True))
    monkeypatch.setattr(emulated, "_uv_target", lambda target, emulation, *reqs: None)
    monkeypatch.setattr(emulated, "in_root", in_root)
    run_dir = tmp_path / "opt" / "tcde" / "runs" / "r"
    emulated.stage_suite(run_dir, examples=5)
    (cell,) = emulated.select_minors(MATRIX, "linux_aarch64", ["2.4"])
    result = emulated.check_minor(
        tmp_path, cell, tmp_path / "x.whl", AARCH64, examples=5, run_dir=run_dir
    )
    if cause is None:
        assert result.ok, result.detail
        assert "tvm-ffi echo: ok" in result.detail
        assert "conformance: 231 cases" in result.detail
    else:
        assert not result.ok
        assert cause in result.detail


@pytest.mark.parametrize(
    ("status", "code", "installed"),
    [
        ("install ok installed", 0, True),
        ("unknown ok not-installed", 0, False),  # known to dpkg, removed
        ("deinstall ok config-files", 0, False),
        ("", 1, False),  # never heard of
    ],
)
def test_a_package_counts_as_installed_only_when_dpkg_says_installed(
    monkeypatch: pytest.MonkeyPatch, status: str, code: int, installed: bool
) -> None:
    def fake(cmd: Sequence[str], **_: object) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(list(cmd), code, stdout=status, stderr="")

    monkeypatch.setattr(emulation, "capture", fake)
    assert emulation._package_installed("binfmt-support") is installed
