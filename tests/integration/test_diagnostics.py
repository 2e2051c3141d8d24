"""``python -m torch_c_dlpack_ext``: the report, the smoke test and the exit status."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.helpers import Bundled, build_fake_library, clean_env, make_package

from _torch_c_dlpack_ext_core.manifest import ManifestEntry
from _torch_c_dlpack_ext_core.naming import Backend

torch = pytest.importorskip("torch")

P = "TORCH_C_DLPACK_EXT_"
TORCH_MINOR = ".".join(torch.__version__.split(".")[:2])
ABI = bool(torch.compiled_with_cxx11_abi())


def diagnose(root: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = clean_env(**env)
    environ["PYTHONPATH"] = str(root)
    return subprocess.run(
        [sys.executable, "-m", "torch_c_dlpack_ext", *args],
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def diagnose_json(root: Path, **env: str) -> tuple[int, dict[str, Any]]:
    proc = diagnose(root, "--json", **env)
    report: dict[str, Any] = json.loads(proc.stdout)
    assert report["package"]["path"].startswith(str(root))
    return proc.returncode, report


@pytest.fixture
def real_package(tmp_path: Path, torch213_library: tuple[Path, ManifestEntry]) -> Path:
    path, entry = torch213_library
    return make_package(
        tmp_path, [Bundled(path, entry.torch, entry.backend, entry.cxx11_abi, entry.torch_build)]
    )


def test_default_table_on_torch_with_api(tmp_path: Path) -> None:
    root = make_package(tmp_path)
    proc = diagnose(root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = dict(line.split(None, 1) for line in proc.stdout.splitlines() if " " in line)
    assert lines["decision"].strip() == "defer"
    assert lines["torch"].startswith(torch.__version__)
    assert lines["smoke"].startswith("test")
    assert "ok: round trip" in lines["smoke"]
    assert "bundled" in lines


@pytest.mark.slow
def test_json_report_of_loaded_library(real_package: Path) -> None:
    returncode, report = diagnose_json(real_package, **{P + "FORCE": "1"})
    assert returncode == 0, report
    assert report["ok"] is True
    assert report["decision"]["kind"] == "load"
    assert report["decision"]["library"].startswith(str(real_package))
    assert report["overrides"] == {P + "FORCE": "1"}
    (bundled,) = report["bundled"]
    assert bundled["torch"] == TORCH_MINOR
    info = report["build_info"]
    assert info["torch"] == torch.__version__
    assert info["backend"] == "cpu"
    assert info["cxx11_abi"] == int(ABI)
    assert (info["torch_major"], info["torch_minor"]) == tuple(
        int(x) for x in TORCH_MINOR.split(".")
    )
    assert report["smoke_test"]["ok"], report["smoke_test"]
    assert report["torch"]["version"] == torch.__version__


def test_unavailable_exits_1_with_reason(tmp_path: Path) -> None:
    root = make_package(tmp_path)
    returncode, report = diagnose_json(root, **{P + "FORCE": "1"})
    assert returncode == 1
    assert report["ok"] is False
    assert report["decision"]["kind"] == "unavailable"
    assert "no bundled library matches" in report["decision"]["reason"]
    assert f"{P}JIT=1" in report["decision"]["remedy"]
    assert report["bundled"] == []


def test_bad_override_is_reported(tmp_path: Path) -> None:
    root = make_package(tmp_path)
    proc = diagnose(root, **{P + "BACKNED": "cpu"})
    assert proc.returncode == 1
    assert f"did you mean {P}BACKEND?" in " ".join(proc.stdout.split())  # wrapped
    assert f"override            {P}BACKNED=cpu" in proc.stdout


def test_smoke_test_catches_a_table_that_does_not_work(tmp_path: Path) -> None:
    # The fake library's table passes the loader's checks but every function fails.
    library = build_fake_library(tmp_path / "lib")
    root = make_package(
        tmp_path / "pkg", [Bundled(library, TORCH_MINOR, Backend.CPU, ABI, torch.__version__)]
    )
    returncode, report = diagnose_json(root, **{P + "FORCE": "1"})
    assert report["decision"]["kind"] == "load"
    assert report["build_info"] == {"torch": "fake", "backend": "cpu", "dlpack": "1.3"}
    assert report["smoke_test"]["ok"] is False
    assert "managed_tensor_from_py_object_no_sync failed" in report["smoke_test"]["detail"]
    assert returncode == 1


@pytest.mark.gpu
@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA or ROCm device; none is present"
)
def test_gpu_tensor_metadata_through_published_capsule() -> None:
    from torch_c_dlpack_ext.__main__ import smoke_test

    result = smoke_test(torch, "cuda")
    assert result.ok, result.detail


def test_forced_table_says_each_thing_once(tmp_path: Path) -> None:
    # FORCE=1 on a torch with its own API, bundled libraries for other torch releases:
    # the list and the advice appear once each, in the table: `python -m` reports the
    # import's outcome there and does not repeat it as a warning above (issue 21, item 17).
    fake = tmp_path / "fake.so"
    fake.write_bytes(b"\0" * 64)
    bundled = [
        Bundled(fake, minor, Backend(backend), abi)
        for minor, abi in (("2.6", False), ("2.8", True))
        for backend in ("cpu", "cuda")
    ]
    root = make_package(tmp_path / "pkg", bundled)
    proc = diagnose(root, **{P + "FORCE": "1"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    table = proc.stdout
    assert table.count("torch 2.6 cuda cxx11abi0") == 1, table
    assert table.count("--no-build-isolation") == 1, table
    assert table.lower().count("no bundled library matches") == 1, table
    assert "\nwarning " not in table, table
    assert "no bundled library matches" not in proc.stderr.lower(), proc.stderr
    assert "TorchCDLPackExtWarning" not in proc.stderr, proc.stderr
    assert max(len(line) for line in table.splitlines()) <= 420


def test_long_file_name_is_clipped_in_the_table(tmp_path: Path) -> None:
    root = make_package(tmp_path)
    manifest = root / "torch_c_dlpack_ext" / "manifest.json"
    data = json.loads(manifest.read_text(encoding="utf-8"))
    entry = {
        "file": "libs/" + "x" * 5000 + ".so",
        "torch": "2.8",
        "torch_build": "2.8.0",
        "backend": "cpu",
        "cxx11_abi": True,
        "dlpack": "1.3",
        "toolchain": "test",
        "gpu_toolkit": None,
        "platform": "linux_x86_64",
        "python": "3.11",
        "size": 1,
        "sha256": "0" * 64,
    }
    libraries = data["libraries"] if isinstance(data, dict) else data
    libraries.append(entry)
    manifest.write_text(json.dumps(data), encoding="utf-8")
    proc = diagnose(root)
    assert "x" * 5000 not in proc.stdout
    assert max(len(line) for line in proc.stdout.splitlines()) <= 420, proc.stdout


def test_the_whole_remedy_in_the_table_and_the_json(tmp_path: Path) -> None:
    """Issue 31, item 13: a universal wheel's build command (over 300 characters) is shown
    whole: wrapped in the table, verbatim in ``--json``; and the diagnostics never send
    the user to the diagnostics."""
    from _torch_c_dlpack_ext_core.installsource import InstallKind, InstallSource
    from _torch_c_dlpack_ext_core.remedies import build_from_source_command

    root = make_package(tmp_path)  # an empty manifest: a universal wheel
    # No installation record beside it (no dist-info): built from its sources, not pinned.
    command = build_from_source_command(source=InstallSource(InstallKind.UNRECORDED, str(root)))
    table = diagnose(root, **{P + "FORCE": "1"})
    assert table.returncode == 1, table.stderr[-2000:]
    assert command in " ".join(table.stdout.split()), table.stdout
    assert "python -m torch_c_dlpack_ext" not in table.stdout, table.stdout
    code, report = diagnose_json(root, **{P + "FORCE": "1"})
    assert code == 1
    assert command in report["decision"]["remedy"], report["decision"]
    assert "torch-c-dlpack-ext==" not in report["decision"]["remedy"], report["decision"]
