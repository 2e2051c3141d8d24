"""devtools/envs/gpu_carry.py without the network: pip's download is replaced by fake wheels."""

from __future__ import annotations

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


def _fake_download(
    monkeypatch: pytest.MonkeyPatch, requires: dict[str, list[str]], padding: int = 0
) -> None:
    def download(requirements: Sequence[str], dest: Path) -> None:
        assert list(requirements) == list(gpu_carry.WHEELS)
        for project, filename in WHEEL_FILES.items():
            _fake_wheel(dest / filename, requires.get(project, []), padding)

    monkeypatch.setattr(gpu_carry, "_download", download)


def test_gathers_exactly_the_wheels_into_the_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_download(
        monkeypatch,
        {"apache-tvm-ffi": ["typing-extensions>=4.13", 'ninja; extra == "cpp"']},
    )
    dest = tmp_path / ".gpu-carry"
    (dest / "stale").mkdir(parents=True)  # replaced as a whole
    wheels = gpu_carry.gather(dest)
    assert sorted(w.name for w in wheels) == sorted(WHEEL_FILES.values())
    assert sorted(p.name for p in dest.iterdir()) == sorted(WHEEL_FILES.values())
    assert all(w.parent == dest.resolve() for w in wheels)
    assert [p.name for p in tmp_path.iterdir()] == [".gpu-carry"], "no staging dir left"


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
    assert line.startswith("python -m pip install --no-index --find-links .gpu-carry ")
    assert "apache-tvm-ffi typing-extensions filelock" in line
    assert line.endswith("&& python tests/gpu/gpu_check.py --require-gpu")
    ignored = (Path(__file__).resolve().parents[2] / ".gitignore").read_text().splitlines()
    assert f"{gpu_carry.CARRY_DIR}/" in ignored
