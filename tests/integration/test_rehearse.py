"""The release rehearsal, against a real pypiserver on 127.0.0.1.

The fast tests drive the pieces (server lifecycle, upload, served hashes, the
refused second upload) with a small but real wheel of a probe project. The slow
test runs the whole rehearsal as ``nox -s rehearse`` does: build, publish,
install into fresh environments with torch 2.13 and a real old torch, and check
the final table.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import socket
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from devtools.base import cli
from devtools.base.errors import ReleaseError
from devtools.rehearse import indexinstall, indexserver
from devtools.rehearse import rehearsal as rehearse
from devtools.release import distfiles, publish
from tests.helpers import devtools_env

from _torch_c_dlpack_ext_core.errors import CommandError
from _torch_c_dlpack_ext_core.manifest import ManifestEntry
from _torch_c_dlpack_ext_core.naming import Backend
from _torch_c_dlpack_ext_core.version import __version__

ROOT = Path(__file__).resolve().parents[2]
PROBE = "rehearsal-probe"


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def make_probe_wheel(directory: Path, version: str = "1.0") -> Path:
    """A minimal, valid pure-Python wheel (twine checks and pypiserver accept it)."""
    dist_info = f"rehearsal_probe-{version}.dist-info"
    files = {
        "rehearsal_probe/__init__.py": b"VALUE = 1\n",
        f"{dist_info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {PROBE}\nVersion: {version}\n"
            "Summary: probe\nDescription-Content-Type: text/plain\n\nprobe\n"
        ).encode(),
        f"{dist_info}/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = [_record_line(name, data) for name, data in files.items()]
    record.append(f"{dist_info}/RECORD,,")
    files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    path = directory / f"rehearsal_probe-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return path


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TWINE_USERNAME", "rehearsal")
    monkeypatch.setenv("TWINE_PASSWORD", "rehearsal")


def test_server_serves_uploads_and_refuses_an_overwrite(tmp_path: Path, credentials: None) -> None:
    wheel = make_probe_wheel(tmp_path)
    served_dir = tmp_path / "index"
    with indexserver.IndexServer(served_dir, log=tmp_path / "server.log") as server:
        assert _port_open(server.port)
        assert indexserver.served_hashes(server.simple_url, PROBE) == {}
        publish.twine_upload([wheel], f"{server.url}/", skip_existing=False)
        original = indexserver.served_hashes(server.simple_url, PROBE)
        assert original == {wheel.name: hashlib.sha256(wheel.read_bytes()).hexdigest()}

        tampered = rehearse._tampered_copy(wheel, tmp_path / "again")
        assert tampered.name == wheel.name
        assert tampered.read_bytes() != wheel.read_bytes()
        with pytest.raises(CommandError):
            publish.twine_upload([tampered], f"{server.url}/", skip_existing=False)
        assert indexserver.served_hashes(server.simple_url, PROBE) == original
        assert (served_dir / wheel.name).read_bytes() == wheel.read_bytes()
    assert not _port_open(server.port)


def _serve_then_fail(server: indexserver.IndexServer, seen: list[bool]) -> None:
    with server:
        seen.append(_port_open(server.port))
        raise RuntimeError("boom")


def test_server_is_stopped_when_the_body_fails(tmp_path: Path) -> None:
    server = indexserver.IndexServer(tmp_path / "index", log=tmp_path / "server.log")
    seen: list[bool] = []
    with pytest.raises(RuntimeError, match="boom"):
        _serve_then_fail(server, seen)
    assert seen == [True]
    assert not _port_open(server.port)


def test_upload_refuses_credentials_in_the_url(tmp_path: Path) -> None:
    wheel = make_probe_wheel(tmp_path)
    with pytest.raises(Exception, match="must not carry credentials"):
        publish.twine_upload([wheel], "http://user:secret@127.0.0.1:1/", skip_existing=False)


def test_twine_check_rejects_broken_metadata(tmp_path: Path) -> None:
    wheel = make_probe_wheel(tmp_path)
    broken = tmp_path / "broken" / wheel.name
    broken.parent.mkdir()
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(broken, "w") as target:
        for item in source.infolist():
            data = source.read(item)
            if item.filename.endswith("METADATA"):
                data = data.replace(b"Name: rehearsal-probe\n", b"")
            target.writestr(item, data)
    publish.twine_check([wheel])
    with pytest.raises(CommandError):
        publish.twine_check([broken])


def test_rehearse_without_cells_or_dist_is_a_config_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["rehearse", "--cells", ""]) == 2
    assert "--cells selects nothing" in capsys.readouterr().err


def test_foreign_python_is_a_free_threaded_one_without_a_wheel(tmp_path: Path) -> None:
    files = _files(tmp_path)
    assert indexinstall._foreign_python(files) == "3.13t"
    cp313t = distfiles.WheelInfo(
        path=tmp_path / "x.whl", tags=frozenset({"cp313-cp313t-linux_x86_64"}), variant=False,
        libraries=files.wheels[0].libraries,
    )  # fmt: skip
    files = dataclasses.replace(files, wheels=(*files.wheels, cp313t))
    assert indexinstall._foreign_python(files) == "3.14t"


def test_publish_refuses_a_dist_without_this_project(tmp_path: Path) -> None:
    make_probe_wheel(tmp_path)
    with pytest.raises(ReleaseError, match="belongs to"):
        distfiles.collect(tmp_path)


@pytest.mark.slow
def test_full_rehearsal(tmp_path: Path) -> None:
    """``nox -s rehearse``'s code path, end to end, bounded in time."""
    # As `nox -s rehearse` runs it: a module of the repository root, the core on PYTHONPATH.
    env = devtools_env()
    cmd = [sys.executable, "-m", "devtools", "rehearse", "--workdir", str(tmp_path)]
    proc = subprocess.run(
        [*cmd, "--budget", "3000"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=3300,
        check=False,
    )
    output = proc.stdout
    assert proc.returncode == 0, output + proc.stderr[-6000:]
    for name in (
        "upload",
        "variants.json",
        "torch 2.13.0",
        f"torch {rehearse.DEFAULT_OLD_TORCH}",
        # The abi3 wheel serves every CPython with the GIL: a free-threaded one without its
        # own wheel gets the universal wheel.
        "py3.13t wheel, torch 2.13.0",
        "second upload",
    ):
        assert any(line.startswith(name) and line.rstrip().endswith("ok")
                   for line in output.splitlines()), (name, output)  # fmt: skip
    assert output.rstrip().endswith("0 failed")
    # The server is gone: the log's port is closed again.
    assert (tmp_path / "pypiserver.log").is_file()


def _files(tmp_path: Path) -> distfiles.ReleaseFiles:
    version = __version__
    entry = ManifestEntry(
        file="libs/libtorch_c_dlpack_ext-torch2.8-cpu-cxx11abi1.so",
        torch="2.8",
        torch_build="2.8.0+cu128",
        backend=Backend.CPU,
        cxx11_abi=True,
        dlpack="1.3",
        toolchain="g++ 12.2.0",
        gpu_toolkit=None,
        platform="linux_x86_64",
        python="abi3",
        size=1,
        sha256="0" * 64,
    )
    combined = tmp_path / f"torch_c_dlpack_ext-{version}-cp39-abi3-linux_x86_64.whl"
    universal = tmp_path / f"torch_c_dlpack_ext-{version}-py3-none-any.whl"
    return distfiles.ReleaseFiles(
        version=version,
        wheels=(
            distfiles.WheelInfo(path=combined, tags=frozenset(), variant=False, libraries=(entry,)),
            distfiles.WheelInfo(path=universal, tags=frozenset(), variant=False, libraries=()),
        ),
        sdists=(),
        variants_index=None,
    )


def _pip_report(name: str, version: str) -> dict[str, object]:
    return {
        "install": [
            {
                "download_info": {"url": f"http://127.0.0.1:1/packages/{name}"},
                "metadata": {"version": version},
            }
        ]
    }


def _decision(kind: str, library: str | None = None, remedy: str = "") -> tuple[str, str, dict]:
    report = {
        "decision": {"kind": kind, "library": library, "reason": "r", "remedy": remedy},
        "smoke_test": {"ok": kind in ("load", "defer")},
    }
    return kind, Path(library).name if library else "-", report


@pytest.mark.parametrize(
    ("wheel", "decision", "problem"),
    [
        ("py3-none-any", _decision("defer"), "pip chose a universal wheel, expected a combined"),
        ("cp39-abi3-linux_x86_64", _decision("load", "/x/libs/lib.so"), "selector decided load"),
    ],
)
def test_scenario_reports_mismatches(
    tmp_path: Path, wheel: str, decision: tuple[str, str, dict], problem: str
) -> None:
    files = _files(tmp_path)
    name = f"torch_c_dlpack_ext-{files.version}-{wheel}.whl"
    check = indexinstall._scenario(
        "s", files=files, pip_report=_pip_report(name, files.version), decision=decision,
        want_wheel="combined", want_kind="defer",
    )  # fmt: skip
    assert not check.ok
    assert problem in check.detail


def test_scenario_checks_version_and_remedy(tmp_path: Path) -> None:
    files = _files(tmp_path)
    name = f"torch_c_dlpack_ext-{files.version}-py3-none-any.whl"
    check = indexinstall._scenario(
        "s", files=files, pip_report=_pip_report(name, "0.1.5"), decision=_decision("unavailable"),
        want_wheel="universal", want_kind="unavailable",
    )  # fmt: skip
    assert "installed version 0.1.5" in check.detail
    assert "without a remedy" in check.detail
    good = indexinstall._scenario(
        "s", files=files, pip_report=_pip_report(name, files.version),
        decision=_decision("unavailable", remedy="install torch>=2.10"),
        want_wheel="universal", want_kind="unavailable",
    )  # fmt: skip
    assert good.ok, good.detail
