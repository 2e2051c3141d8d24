"""Manifest: round trip, and every way verification must refuse a library."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest

from torch_c_dlpack_ext._manifest import (
    ManifestEntry,
    atomic_write_bytes,
    dump_manifest,
    load_manifest,
    verify_file,
    write_manifest,
)
from torch_c_dlpack_ext._naming import Backend
from torch_c_dlpack_ext.errors import ManifestError

PAYLOAD = b"\x7fELF" + bytes(range(256)) * 8


def _entry(
    file: str = "libs/libx.so", payload: bytes = PAYLOAD, **changes: object
) -> ManifestEntry:
    entry = ManifestEntry(
        file=file,
        torch="2.6",
        torch_build="2.6.0+cu124",
        backend=Backend.CUDA,
        cxx11_abi=False,
        dlpack="1.3",
        toolchain="g++ 12.2.0",
        gpu_toolkit="12.4",
        platform="linux_x86_64",
        size=len(payload),
        sha256=hashlib.sha256(payload).hexdigest(),
    )
    return dataclasses.replace(entry, **changes)  # type: ignore[arg-type]


@pytest.fixture
def package(tmp_path: Path) -> Path:
    (tmp_path / "libs").mkdir()
    (tmp_path / "libs" / "libx.so").write_bytes(PAYLOAD)
    return tmp_path


def test_round_trip_preserves_every_field(tmp_path: Path) -> None:
    entries = [_entry("libs/b.so"), _entry("libs/a.so", cxx11_abi=None, gpu_toolkit=None)]
    write_manifest(tmp_path / "manifest.json", entries)
    loaded = load_manifest(tmp_path / "manifest.json")
    assert sorted(loaded, key=lambda e: e.file) == sorted(entries, key=lambda e: e.file)
    assert loaded[0].backend is Backend.CUDA
    assert loaded[0].torch_version == (2, 6)


def test_dump_is_deterministic_regardless_of_order() -> None:
    a, b = _entry("libs/a.so"), _entry("libs/b.so")
    assert dump_manifest([a, b]) == dump_manifest([b, a])
    assert json.loads(dump_manifest([a]))["schema"] == 1


def test_verify_accepts_the_recorded_file(package: Path) -> None:
    assert verify_file(_entry(), package) == package / "libs" / "libx.so"


def test_verify_rejects_a_truncated_file(package: Path) -> None:
    (package / "libs" / "libx.so").write_bytes(PAYLOAD[:100])
    with pytest.raises(ManifestError, match=r"size 100 bytes, manifest says \d+"):
        verify_file(_entry(), package)


def test_verify_rejects_same_size_other_content(package: Path) -> None:
    (package / "libs" / "libx.so").write_bytes(bytes(len(PAYLOAD)))
    with pytest.raises(ManifestError, match=r"sha256 .* does not match"):
        verify_file(_entry(), package)


def test_verify_rejects_a_missing_file(package: Path) -> None:
    (package / "libs" / "libx.so").unlink()
    with pytest.raises(ManifestError, match=r"not readable.*reinstall"):
        verify_file(_entry(), package)


def test_load_rejects_bad_json(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ManifestError, match="not valid JSON"):
        load_manifest(tmp_path / "manifest.json")


def test_load_rejects_a_missing_manifest(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="no manifest at"):
        load_manifest(tmp_path / "manifest.json")


def test_load_rejects_another_schema(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text('{"schema": 99, "libraries": []}', encoding="utf-8")
    with pytest.raises(ManifestError, match="schema 99"):
        load_manifest(tmp_path / "manifest.json")


@pytest.mark.parametrize("bad", ["../evil.so", "libs/../../evil.so", "/etc/evil.so"])
def test_load_rejects_path_traversal(tmp_path: Path, bad: str) -> None:
    data = {"schema": 1, "libraries": [_entry().to_json() | {"file": bad}]}
    (tmp_path / "manifest.json").write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ManifestError, match="outside the package"):
        load_manifest(tmp_path / "manifest.json")


def test_load_names_missing_fields(tmp_path: Path) -> None:
    entry = _entry().to_json()
    del entry["sha256"]
    (tmp_path / "manifest.json").write_text(
        json.dumps({"schema": 1, "libraries": [entry]}), encoding="utf-8"
    )
    with pytest.raises(ManifestError, match="lacks sha256"):
        load_manifest(tmp_path / "manifest.json")


def test_load_rejects_an_unknown_backend(tmp_path: Path) -> None:
    entry = _entry().to_json() | {"backend": "metal"}
    (tmp_path / "manifest.json").write_text(
        json.dumps({"schema": 1, "libraries": [entry]}), encoding="utf-8"
    )
    with pytest.raises(ManifestError, match="invalid"):
        load_manifest(tmp_path / "manifest.json")


def test_atomic_write_leaves_no_temporary_behind(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "file.json"
    atomic_write_bytes(target, b"one")
    atomic_write_bytes(target, b"two")
    assert target.read_bytes() == b"two"
    assert [p.name for p in target.parent.iterdir()] == ["file.json"]
