"""The remedy is shown whole (issue 31, item 13): the JIT remedy stopped at "put nvcc ..."
in the warning, the diagnostics and ``--json``; ``str(status())`` clipped the build
command at 320 characters; the diagnostics' remedy sent the user to the diagnostics. Text
output wraps at word boundaries (a command is never cut), the fields and JSON keep the
whole string, and no page sends the user to itself."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from tests.conftest import FakeTorch

from _torch_c_dlpack_ext_core import headers
from _torch_c_dlpack_ext_core.errors import GPUHeadersNotFoundError
from _torch_c_dlpack_ext_core.headers import find_gpu_toolkit
from _torch_c_dlpack_ext_core.naming import Backend
from _torch_c_dlpack_ext_core.remedies import build_from_source_command
from _torch_c_dlpack_ext_core.torchinstall import TorchInstall
from torch_c_dlpack_ext import __main__ as diagnostics
from torch_c_dlpack_ext import _apply, _jit, _wording
from torch_c_dlpack_ext._decide import Decision, DecisionKind, Settings, decide
from torch_c_dlpack_ext._status import Status
from torch_c_dlpack_ext._torchinfo import TorchInfo

P = "TORCH_C_DLPACK_EXT_"
CUDA_TORCH = TorchInfo(
    version="2.8.0+cu128",
    backend=Backend.CUDA,
    cxx11_abi=True,
    cuda_version="12.8",
    hip_version=None,
    has_capsule=False,
    has_legacy_int=False,
    has_to_dlpack=False,  # no portable table to fall back to: the native JIT's failure shows
)


def flat(text: str) -> str:
    return " ".join(text.split())


def headers_error(fake_torch: FakeTorch, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The real error of a CUDA build without toolkit headers (its fix is long)."""
    monkeypatch.setenv("PATH", str(tmp_path / "no-nvcc"))
    # Nor a toolkit in a standard location of this machine (/usr/local/cuda).
    monkeypatch.setattr(headers, "_STANDARD_CUDA_HOMES", (tmp_path / "no-cuda",))
    torch = TorchInstall.from_path(fake_torch("2.8.0+cu128", abi=True, cuda="12.8"))
    with pytest.raises(GPUHeadersNotFoundError) as caught:
        find_gpu_toolkit(Backend.CUDA, torch, environ={})
    return str(caught.value)


def jit_failure(monkeypatch: pytest.MonkeyPatch, message: str) -> Status:
    def build(*args: object) -> None:
        raise GPUHeadersNotFoundError(message)

    monkeypatch.setattr(_jit, "build", build)
    decision = Decision(kind=DecisionKind.JIT, backend=Backend.CUDA, reason="asked")
    action = _apply._Action(None, CUDA_TORCH, decision, Settings(jit=True), Path("/nowhere"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fields = action.jit()
    return _apply.status_of(fields)


def test_the_jit_failure_keeps_the_whole_fix(
    fake_torch: FakeTorch, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    message = headers_error(fake_torch, tmp_path, monkeypatch)
    assert len(message) > 300, message  # what used to be cut at "put nvcc ..."
    status = jit_failure(monkeypatch, message)
    assert flat(message) in flat(status.reason), status.reason
    assert flat(message) in flat(status.warnings[0]), status.warnings
    # str(status()) wraps, never cuts, and its lines stay readable.
    text = str(status)
    assert flat(message) in flat(text), text
    assert "..." not in text, text
    long_words = [w for w in text.split() if len(w) > 80]
    assert all(len(line) <= 100 or any(w in line for w in long_words) for line in text.split("\n"))


def test_str_status_keeps_the_whole_build_command() -> None:
    decision = decide(CUDA_TORCH._replace(backend=Backend.CPU, cuda_version=None), (), Settings())
    assert decision.kind is DecisionKind.UNAVAILABLE, decision
    status = Status(kind=decision.kind, reason=decision.reason, remedy=decision.remedy)
    assert len(decision.remedy) > 320, decision.remedy
    assert build_from_source_command() in flat(str(status)), str(status)


def test_the_diagnostics_table_wraps_the_whole_remedy(
    fake_torch: FakeTorch,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    message = headers_error(fake_torch, tmp_path, monkeypatch)
    monkeypatch.setattr(_wording, "run_as_diagnostics", lambda: True)
    status = jit_failure(monkeypatch, message)
    assert "python -m torch_c_dlpack_ext" not in status.remedy, status.remedy
    report = {
        "package": {"version": "0", "path": "/x"},
        "python": "3.11",
        "python_abi": "cp311",
        "torch": None,
        "bundled": [],
        "decision": {
            "kind": "unavailable",
            "selected": "jit",
            "library": None,
            "reason": status.reason,
            "remedy": status.remedy + "; " + build_from_source_command(),
            "warnings": list(status.warnings),
        },
        "overrides": {},
        "build_info": None,
        "smoke_test": {"ok": False, "detail": "torch is not importable"},
    }
    diagnostics._print_table(report)
    table = capsys.readouterr().out
    assert flat(message) in flat(table), table
    assert build_from_source_command() in flat(table), table
    assert "python -m torch_c_dlpack_ext" not in table, table
    assert "..." not in table, table


def test_outside_the_diagnostics_the_remedy_points_to_them(
    fake_torch: FakeTorch, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    message = headers_error(fake_torch, tmp_path, monkeypatch)
    monkeypatch.setattr(_wording, "run_as_diagnostics", lambda: False)
    status = jit_failure(monkeypatch, message)
    assert "python -m torch_c_dlpack_ext shows details" in status.remedy, status.remedy


@pytest.mark.parametrize(("version", "offered"), [("2.3.1", False), ("2.8.0", True)])
def test_a_failed_bundled_library_offers_the_jit_only_where_it_can_build(
    tmp_path: Path, version: str, offered: bool
) -> None:
    """Issue 36 item 9: a bundled library that fails to load (here: its file is missing)
    was answered "or set JIT=1 to build a library for this torch" also where no native
    library can be built (a library bundled for torch 2.3, outside the driver's range)."""
    from _torch_c_dlpack_ext_core.manifest import ManifestEntry

    entry = ManifestEntry(
        file="libs/missing.so",
        torch=version.rsplit(".", 1)[0],
        torch_build=version,
        backend=Backend.CPU,
        cxx11_abi=False,
        dlpack="1.3",
        toolchain="test",
        gpu_toolkit=None,
        platform="linux_x86_64",
        python="abi3",
        size=1,
        sha256="0" * 64,
    )
    info = CUDA_TORCH._replace(version=version, backend=Backend.CPU, cxx11_abi=False)
    decision = Decision(kind=DecisionKind.LOAD, backend=Backend.CPU, entry=entry, reason="x")
    action = _apply._Action(None, info, decision, Settings(), tmp_path / "torch_c_dlpack_ext")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        status = _apply.status_of(action.load())
    assert status.kind is DecisionKind.UNAVAILABLE, status
    assert "no library could be loaded" in status.reason, status.reason
    assert "no installation record for this copy" in status.remedy, status.remedy
    assert (f"{P}JIT=1" in status.remedy) is offered, status.remedy
