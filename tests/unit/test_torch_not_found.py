"""``-C torch=<dir>`` (``TorchInstall.from_path``) on a directory without a usable torch:
the message names the files looked for and where, and suggests no torch release the
directory does not name (it once said ``torch==2.6.0`` whatever the target)."""

from __future__ import annotations

from pathlib import Path

import build_backend
import pytest

from _torch_c_dlpack_ext_core.errors import TorchInstallError
from _torch_c_dlpack_ext_core.torchinstall import TorchInstall


def test_an_empty_directory_names_every_place_looked_in(tmp_path: Path) -> None:
    with pytest.raises(TorchInstallError) as info:
        TorchInstall.from_path(tmp_path)
    message = str(info.value)
    assert f"no torch installation at {tmp_path}" in message
    assert "version.py and the C++ headers (include/)" in message
    for place in (
        tmp_path / "torch",
        tmp_path / "lib*" / "python3*" / "site-packages" / "torch",
        tmp_path / "Lib" / "site-packages" / "torch",
    ):
        assert str(place) in message
    assert "torch==2." not in message  # no made-up release
    assert "torch==<its version>" in message


def test_a_torch_without_headers_is_named_with_its_release(tmp_path: Path) -> None:
    torch_dir = tmp_path / "lib" / "python3.12" / "site-packages" / "torch"
    torch_dir.mkdir(parents=True)
    (torch_dir / "version.py").write_text("__version__ = '2.8.0+cu128'\n", encoding="utf-8")
    with pytest.raises(TorchInstallError) as info:
        TorchInstall.from_path(tmp_path)
    message = str(info.value)
    assert f"the torch 2.8.0+cu128 at {torch_dir} has no C++ headers" in message
    assert f"{torch_dir / 'include'} does not exist" in message
    assert "torch==2.8.0'" in message
    assert "2.6.0" not in message


def test_the_backend_says_it_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "version.py").write_text("__version__ = '2.9.1'\n", encoding="utf-8")
    with pytest.raises(SystemExit):
        build_backend.build_wheel(str(tmp_path / "out"), {"torch": str(tmp_path)})
    first = capsys.readouterr().err.splitlines()[0]
    assert first.startswith("torch-c-dlpack-ext cannot be built: the torch 2.9.1 at ")
    assert "torch==2.9.1" in first
