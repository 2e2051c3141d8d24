"""The core's file I/O (:mod:`_torch_c_dlpack_ext_core.files`) apart from the model.

The manifest module is the model alone (no file I/O); writes are atomic and take the
umask's mode; a failed write leaves the old content and no temporary behind.
"""

from __future__ import annotations

import ast
import os
import stat
import sys
from pathlib import Path

import pytest

from _torch_c_dlpack_ext_core import files, manifest
from _torch_c_dlpack_ext_core.errors import ManifestError
from _torch_c_dlpack_ext_core.manifest import ManifestEntry, dump_manifest, parse_manifest

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="POSIX modes and umask")

ENTRY = ManifestEntry(
    file="libs/libtorch_c_dlpack_ext-torch2.6-cpu-cxx11abi0.so",
    torch="2.6",
    torch_build="2.6.0",
    backend=manifest.Backend.CPU,
    cxx11_abi=False,
    dlpack="1.3",
    toolchain="g++ 12.2.0",
    gpu_toolkit=None,
    platform="linux_x86_64",
    python="abi3",
    size=3,
    sha256="0" * 64,
)


def test_the_manifest_module_does_no_file_io() -> None:
    """The model imports neither the OS modules nor the file helpers, and opens nothing."""
    tree = ast.parse(Path(manifest.__file__).read_text(encoding="utf-8"))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add("." * node.level + (node.module or ""))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            assert node.func.id != "open"
    assert not imported & {"os", "stat", "hashlib", "tempfile", "shutil", ".files", ".trust"}


def test_parse_manifest_reads_bytes_and_names_the_file_in_messages() -> None:
    assert parse_manifest(dump_manifest([ENTRY]), "manifest X") == (ENTRY,)
    with pytest.raises(ManifestError, match=r"^manifest X is empty"):
        parse_manifest(b"  \n", "manifest X")
    with pytest.raises(ManifestError, match=r"manifest X: libraries\[0\] lacks"):
        parse_manifest(b'{"schema": 1, "libraries": [{}]}', "manifest X")


def test_load_manifest_gives_the_path_to_the_parser(tmp_path: Path) -> None:
    path = tmp_path / "manifest.json"
    path.write_bytes(b"[]")
    with pytest.raises(ManifestError, match=f"manifest {path} is an array, expected"):
        files.load_manifest(path)


def test_a_failed_atomic_write_keeps_the_old_content_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "record.json"
    files.atomic_write_bytes(target, b"old")

    def no_space(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(OSError, match="No space left"):
        files.atomic_write_bytes(target, b"new content that never lands")
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["record.json"]


def test_an_interrupted_atomic_write_leaves_nothing_half_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A KeyboardInterrupt between the write and the rename is cleaned up too."""
    target = tmp_path / "new.json"

    def interrupted(src: object, dst: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        files.atomic_write_bytes(target, b"data")
    assert list(tmp_path.iterdir()) == []


@posix_only
@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_atomic_writes_take_the_umasks_mode(tmp_path: Path, umask: int, mode: int) -> None:
    old = os.umask(umask)
    try:
        files.atomic_write_bytes(tmp_path / "sub" / "f", b"x")
        fd, path = files.new_temp_file(tmp_path, prefix=".x.", suffix=".tmp", mode=0o777)
        os.close(fd)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "sub" / "f").stat().st_mode) == mode
    assert stat.S_IMODE(path.stat().st_mode) == 0o777 & ~umask
    assert path.name.startswith(f".x.{os.getpid()}-")
    assert path.name.endswith(".tmp")


def test_write_then_load_then_verify(tmp_path: Path) -> None:
    data = b"lib"
    lib = tmp_path / ENTRY.file
    lib.parent.mkdir()
    lib.write_bytes(data)
    entry = ENTRY._replace(sha256=files.sha256_of(lib))
    files.write_manifest(tmp_path / "manifest.json", [entry])
    (loaded,) = files.load_manifest(tmp_path / "manifest.json")
    assert files.read_verified(loaded, tmp_path) == (lib, data)
    lib.write_bytes(b"LIB")
    with pytest.raises(ManifestError, match="does not match the manifest"):
        files.verify_file(loaded, tmp_path)


@posix_only
@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_a_reserved_temporary_reports_the_mode_it_got(tmp_path: Path, umask: int) -> None:
    """What a tool replaces (a linker's output) gets back the mode the umask gave."""
    old = os.umask(umask)
    try:
        path, mode = files.reserve_temp_file(tmp_path, prefix=".lib.so.", suffix=".tmp")
    finally:
        os.umask(old)
    assert mode == 0o777 & ~umask
    assert stat.S_IMODE(path.stat().st_mode) == mode
    assert path.read_bytes() == b""
    assert path.parent == tmp_path
