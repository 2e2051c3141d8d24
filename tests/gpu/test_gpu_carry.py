"""devtools/envs/gpu_carry.py without the network: pip's downloads are replaced by fake wheels
and a fake sdist (a tar.gz laid out as apache-tvm-ffi's)."""

from __future__ import annotations

import io
import tarfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

import pytest
from devtools.base.errors import ProvisionError
from devtools.envs import gpu_carry

WHEEL_FILES = {
    "apache-tvm-ffi": "apache_tvm_ffi-0.1.15.post2-cp312-cp312-manylinux_2_28_x86_64.whl",
    "typing-extensions": "typing_extensions-4.16.0-py3-none-any.whl",
    "filelock": "filelock-4.3.1-py3-none-any.whl",
}


def _fake_wheel(path: Path, requires: Sequence[str], padding: int = 0) -> None:
    name = path.name.split("-")[0]
    with zipfile.ZipFile(path, "w") as archive:
        metadata = "Metadata-Version: 2.1\nName: x\nVersion: 1\n" + "".join(
            f"Requires-Dist: {r}\n" for r in requires
        )
        archive.writestr(f"{name}-1.dist-info/METADATA", metadata)
        archive.writestr(f"{name}/blob", b"\0" * padding)


SDIST_FILE = "apache_tvm_ffi-0.1.15.post2.tar.gz"
TOP = "apache_tvm_ffi-0.1.15.post2"


def _fake_sdist(path: Path, members: dict[str, bytes]) -> None:
    with tarfile.open(path, "w:gz") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))


def _sdist_members(tests: Sequence[str] = gpu_carry.TVM_FFI_TESTS) -> dict[str, bytes]:
    members = {f"{TOP}/tests/python/{name}": f"# {name}\n".encode() for name in tests}
    members[f"{TOP}/tests/python/utils/helper.py"] = b"# helper\n"
    members[f"{TOP}/tests/cpp/test_x.cc"] = b"// not a Python test\n"
    members[f"{TOP}/python/tvm_ffi/__init__.py"] = b"# the package\n"
    return members


def _fake_download(
    monkeypatch: pytest.MonkeyPatch,
    requires: dict[str, list[str]],
    padding: int = 0,
    sdist: dict[str, bytes] | None = None,
) -> None:
    def download(requirements: Sequence[str], dest: Path) -> None:
        assert list(requirements) == list(gpu_carry.WHEELS)
        for project, filename in WHEEL_FILES.items():
            _fake_wheel(dest / filename, requires.get(project, []), padding)

    def download_sdist(requirement: str, dest: Path) -> None:
        assert requirement == gpu_carry.SDIST
        _fake_sdist(dest / SDIST_FILE, _sdist_members() if sdist is None else sdist)

    monkeypatch.setattr(gpu_carry, "_download", download)
    monkeypatch.setattr(gpu_carry, "_download_sdist", download_sdist)


def test_gathers_exactly_the_wheels_into_the_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_download(
        monkeypatch,
        {"apache-tvm-ffi": ["typing-extensions>=4.13", 'ninja; extra == "cpp"']},
    )
    dest = tmp_path / ".gpu-carry"
    (dest / "stale").mkdir(parents=True)  # replaced as a whole
    carried = gpu_carry.gather(dest)
    expected = sorted([*WHEEL_FILES.values(), SDIST_FILE])
    assert sorted(w.name for w in carried) == expected
    assert sorted(p.name for p in dest.iterdir()) == expected
    assert all(w.parent == dest.resolve() for w in carried)
    assert [p.name for p in tmp_path.iterdir()] == [".gpu-carry"], "no staging dir left"


def test_an_sdist_without_the_tests_the_check_runs_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_download(monkeypatch, {}, sdist=_sdist_members(gpu_carry.TVM_FFI_TESTS[1:]))
    with pytest.raises(
        ProvisionError, match=r"has no tests/python/test_current_work_stream_gpu\.py"
    ):
        gpu_carry.gather(tmp_path / ".gpu-carry")
    assert list(tmp_path.iterdir()) == []


def test_the_consumer_tests_come_out_of_the_carried_sdist(tmp_path: Path) -> None:
    carry = tmp_path / "carry"
    carry.mkdir()
    _fake_sdist(carry / SDIST_FILE, _sdist_members())
    out = gpu_carry.extract_consumer_tests(carry, tmp_path / "tests")
    found = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert found == sorted([*gpu_carry.TVM_FFI_TESTS, "utils/helper.py"])
    assert (out / "test_stream.py").read_text() == "# test_stream.py\n"


def test_a_member_pointing_outside_is_refused(tmp_path: Path) -> None:
    carry = tmp_path / "carry"
    carry.mkdir()
    members = _sdist_members()
    members[f"{TOP}/tests/python/../../../../escape.py"] = b"# out\n"
    _fake_sdist(carry / SDIST_FILE, members)
    with pytest.raises(ProvisionError, match=r"points outside its folder"):
        gpu_carry.extract_consumer_tests(carry, tmp_path / "tests")
    assert not (tmp_path / "escape.py").exists()


def test_without_a_carried_sdist_the_error_says_how_to_carry_one(tmp_path: Path) -> None:
    with pytest.raises(ProvisionError, match=r"run `python -m devtools gpu-carry`"):
        gpu_carry.extract_consumer_tests(tmp_path, tmp_path / "tests")


def test_a_requirement_the_machine_lacks_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_download(monkeypatch, {"apache-tvm-ffi": ["ml-dtypes>=0.5"]})
    with pytest.raises(
        ProvisionError, match=r"requires ml-dtypes>=0\.5, which the GPU machine lacks"
    ):
        gpu_carry.gather(tmp_path / ".gpu-carry")
    assert list(tmp_path.iterdir()) == []


def test_over_the_limit_is_an_error_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_download(monkeypatch, {}, padding=4096)
    with pytest.raises(ProvisionError, match=r"MiB, over the 0 MiB the GPU machine accepts"):
        gpu_carry.gather(tmp_path / ".gpu-carry", limit=1000)
    assert list(tmp_path.iterdir()) == []


def test_the_install_line_is_offline_and_runs_the_check() -> None:
    line = gpu_carry.install_line()
    assert line.startswith(
        "python -m pip install --no-index --only-binary :all: --find-links .gpu-carry "
    )
    assert "apache-tvm-ffi typing-extensions filelock" in line
    assert line.endswith('&& python tests/gpu/gpu_run.py --out "$OUT" --require-gpu')
    assert (Path(__file__).with_name("gpu_run.py")).is_file()
    elsewhere = gpu_carry.install_line("/data/carry")
    assert "--find-links /data/carry " in elsewhere
    assert elsewhere.endswith('gpu_run.py --carry /data/carry --out "$OUT" --require-gpu')
    ignored = (Path(__file__).resolve().parents[2] / ".gitignore").read_text().splitlines()
    assert f"{gpu_carry.CARRY_DIR}/" in ignored
