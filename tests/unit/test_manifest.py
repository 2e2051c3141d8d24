"""Manifest: round trip, and every way verification must refuse a library."""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest

from _torch_c_dlpack_ext_core.errors import ManifestError
from _torch_c_dlpack_ext_core.files import (
    atomic_write_bytes,
    load_manifest,
    verify_file,
    write_manifest,
)
from _torch_c_dlpack_ext_core.manifest import REQUIRED_FIELDS, ManifestEntry, dump_manifest
from _torch_c_dlpack_ext_core.naming import Backend

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
        python="abi3",
        size=len(payload),
        sha256=hashlib.sha256(payload).hexdigest(),
    )
    return entry._replace(**changes)  # type: ignore[arg-type]


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


def test_dump_is_compact_json_with_one_entry_a_line() -> None:
    entries = [_entry("libs/b.so"), _entry("libs/a.so", cxx11_abi=None, gpu_toolkit=None)]
    text = dump_manifest(entries).decode("utf-8")
    lines = text.splitlines()
    # The opening, one line per entry (sorted by file), the closing; no indentation.
    assert len(lines) == len(entries) + 2
    assert [json.loads(line.rstrip(","))["file"] for line in lines[1:-1]] == [
        "libs/a.so",
        "libs/b.so",
    ]
    assert not any(line.startswith(" ") for line in lines)
    for line in lines[1:-1]:  # compact separators, sorted keys
        entry = line.removesuffix(",")
        assert json.dumps(json.loads(entry), separators=(",", ":"), sort_keys=True) == entry
    data = json.loads(text)
    ordered = sorted(entries, key=lambda e: e.file)
    assert data == {"schema": 1, "libraries": [e.to_json() for e in ordered]}
    assert json.loads(dump_manifest([])) == {"schema": 1, "libraries": []}


def test_verify_accepts_the_recorded_file(package: Path) -> None:
    assert verify_file(_entry(), package) == package / "libs" / "libx.so"


def test_verify_rejects_a_truncated_file(package: Path) -> None:
    (package / "libs" / "libx.so").write_bytes(PAYLOAD[:100])
    with pytest.raises(ManifestError, match=r"100 bytes, the manifest says \d+"):
        verify_file(_entry(), package)


def test_verify_rejects_same_size_other_content(package: Path) -> None:
    (package / "libs" / "libx.so").write_bytes(bytes(len(PAYLOAD)))
    with pytest.raises(ManifestError, match=r"sha256 .* does not match"):
        verify_file(_entry(), package)


def test_verify_rejects_a_missing_file(package: Path) -> None:
    (package / "libs" / "libx.so").unlink()
    # The core cannot know how this copy was installed: it names no command, and so no
    # version pinned on an index (the selector names the command for the installation).
    with pytest.raises(
        ManifestError, match=r"is missing; reinstall torch-c-dlpack-ext \S+ the way it was"
    ) as info:
        verify_file(_entry(), package)
    assert "pip install" not in str(info.value)


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
    with pytest.raises(ManifestError, match="may point outside the package"):
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
    with pytest.raises(ManifestError, match="expected one of 'cpu', 'cuda', 'rocm'"):
        load_manifest(tmp_path / "manifest.json")


def test_atomic_write_leaves_no_temporary_behind(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "file.json"
    atomic_write_bytes(target, b"one")
    atomic_write_bytes(target, b"two")
    assert target.read_bytes() == b"two"
    assert [p.name for p in target.parent.iterdir()] == ["file.json"]


# --- schema validation: every field's JSON type, and the file itself ----------------------

#: A value of each JSON type; each field accepts only its own.
JSON_VALUES: dict[str, object] = {
    "null": None,
    "bool": True,
    "int": 7,
    "float": 2.8,
    "string": "x",
    "array": [1],
    "object": {"a": 1},
}
#: The JSON types each field accepts (its valid value of that type is the entry's own).
ACCEPTS = {
    "file": {"string"},
    "torch": {"string"},
    "torch_build": {"string"},
    "backend": {"string"},
    "cxx11_abi": {"bool", "null"},
    "dlpack": {"string"},
    "toolchain": {"string"},
    "gpu_toolkit": {"string", "null"},
    "platform": {"string"},
    "python": {"string"},
    "size": {"int"},
    "sha256": {"string"},
}


def write_raw(tmp_path: Path, data: bytes | str) -> Path:
    path = tmp_path / "manifest.json"
    path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return path


def with_entry(tmp_path: Path, **fields: object) -> Path:
    entry = _entry().to_json() | fields
    return write_raw(tmp_path, json.dumps({"schema": 1, "libraries": [entry]}))


def test_schema_covers_every_field() -> None:
    assert set(ACCEPTS) == set(REQUIRED_FIELDS)


@pytest.mark.parametrize(
    ("field", "kind"),
    [(f, k) for f in ACCEPTS for k in JSON_VALUES if k not in ACCEPTS[f]],
)
def test_a_field_of_the_wrong_json_type_is_a_schema_error(
    tmp_path: Path, field: str, kind: str
) -> None:
    path = with_entry(tmp_path, **{field: JSON_VALUES[kind]})
    with pytest.raises(ManifestError, match=rf"libraries\[0\]\.{field} is .*expected") as info:
        load_manifest(path)
    # One line, the remedy once.
    assert "\n" not in str(info.value)
    assert str(info.value).count("reinstall torch-c-dlpack-ext") == 1


def test_a_string_size_is_a_schema_error_not_a_size_mismatch(tmp_path: Path) -> None:
    path = with_entry(tmp_path, size=str(len(PAYLOAD)))
    with pytest.raises(ManifestError) as info:
        load_manifest(path)
    message = str(info.value)
    assert f"libraries[0].size is a string ('{len(PAYLOAD)}'), expected an integer" in message
    assert "manifest says" not in message


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("torch", "2", "expected a torch 'major.minor'"),
        ("torch", "2.x", "expected a torch 'major.minor'"),
        ("torch", "٢.٨", "expected a torch 'major.minor'"),  # non-ASCII digits
        ("size", 0, "expected an integer number of bytes"),
        ("size", -1, "expected an integer number of bytes"),
        ("size", 2**70, "expected an integer number of bytes"),
        ("sha256", "A" * 64, "64 lowercase hex"),
        ("sha256", "0" * 63, "64 lowercase hex"),
        ("file", "libs/a\x00.so", "may point outside the package"),
        ("file", "libs\\a.so", "may point outside the package"),
        ("file", "C:/a.so", "may point outside the package"),
        ("file", "libs//a.so", "may point outside the package"),
        ("file", "./a.so", "may point outside the package"),
        ("file", "", "expected a file name"),
        ("toolchain", "g++\x00", "control characters"),
        ("toolchain", "", "expected a non-empty string"),
        ("platform", "x" * 300, "longer than 256 characters"),
        ("backend", "CUDA", "expected one of"),
        ("python", "abi4", "expected 'abi3', 'abi3.12', a free-threaded CPython such as '3.14t'"),
        ("python", "ABI3", "expected 'abi3'"),
        ("python", "3", "expected 'abi3'"),
        ("python", "3.14tt", "expected 'abi3'"),
        ("python", "cp314t", "expected 'abi3'"),
        ("python", "3.x", "expected 'abi3'"),
    ],
)
def test_bad_field_values_are_refused(tmp_path: Path, field: str, value: object, says: str) -> None:
    with pytest.raises(ManifestError, match=re.escape(says)):
        load_manifest(with_entry(tmp_path, **{field: value}))


@pytest.mark.parametrize("python", ["abi3", "3.13t", "3.14t", "3.11", "3.9"])
def test_python_values_of_abi3_free_threaded_and_older_manifests_read(
    tmp_path: Path, python: str
) -> None:
    # "3.11": manifests written before abi3 (one CPython with the GIL) still read.
    (entry,) = load_manifest(with_entry(tmp_path, python=python))
    assert entry.python == python


def test_a_5000_character_file_name_is_not_echoed_whole(tmp_path: Path) -> None:
    with pytest.raises(ManifestError) as info:
        load_manifest(with_entry(tmp_path, file="a" * 5000))
    message = str(info.value)
    assert len(message) < 500, len(message)
    assert "(5000 characters)" in message


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"", "is empty"),
        (b"   \n", "is empty"),
        (b'{"schema": 1, "libraries": [', "not valid JSON"),
        ('{"schema": 1, "libraries": []}'.encode("utf-16"), "not UTF-8"),
        (b'{"schema": 1, "libraries": [], "x": "\xff"}', "not UTF-8 text (byte 37)"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b'{"schema": 1, "libraries": [' + b"[" * 5000 + b"]" * 5000 + b"]}", "nested too"),
        (b'{"schema": 1, "libraries": []' + b" " * (1 << 20) + b"}", "more than a manifest"),
        (b'{"schema": ' + b"1" * 5000 + b', "libraries": []}', "not valid JSON"),
        (b'{"schema": true, "libraries": []}', "has schema True"),
        (b'{"schema": 1.0, "libraries": []}', "has schema 1.0"),
        (b'{"schema": 1, "libraries": {}}', "'libraries' is an object"),
        (b'{"schema": 1}', "'libraries' is null"),
        (b'{"schema": 1, "libraries": [5]}', "libraries[0] is a number (5), expected an object"),
        (b"[1, 2]", "is an array, expected a JSON object"),
        (b'"\\u0000"', "is a string"),
        (b"NaN", "is a number (nan)"),
    ],
)
def test_malformed_manifests_are_refused_with_the_cause(
    tmp_path: Path, content: bytes, says: str
) -> None:
    with pytest.raises(ManifestError, match=re.escape(says)) as info:
        load_manifest(write_raw(tmp_path, content))
    assert len(str(info.value)) < 600, str(info.value)


def test_unknown_keys_are_ignored(tmp_path: Path) -> None:
    (entry,) = load_manifest(with_entry(tmp_path, added_by_a_newer_writer=[1, {"x": None}]))
    assert entry == _entry()


def test_a_directory_in_place_of_the_manifest(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").mkdir()
    with pytest.raises(ManifestError, match="is a directory, not a regular file"):
        load_manifest(tmp_path / "manifest.json")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_fifo_in_place_of_the_manifest_does_not_block(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "manifest.json")
    started = time.monotonic()
    with pytest.raises(ManifestError, match="is a FIFO, not a regular file"):
        load_manifest(tmp_path / "manifest.json")
    assert time.monotonic() - started < 5


def test_a_symlinked_manifest_is_read_through(tmp_path: Path) -> None:
    real = with_entry(tmp_path)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "manifest.json").symlink_to(real)
    assert load_manifest(tmp_path / "other" / "manifest.json") == (_entry(),)


def test_a_dangling_or_looping_symlink_manifest(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").symlink_to(tmp_path / "manifest.json")
    with pytest.raises(ManifestError, match="is not readable"):
        load_manifest(tmp_path / "manifest.json")


def test_an_unreadable_manifest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = with_entry(tmp_path)
    if os.geteuid() != 0:  # as anyone but root (a CI runner, a contributor); root reads mode 000
        path.chmod(0)
    else:
        # root reads a mode-000 file, so make the open fail as it would for anyone else.
        real_open = os.open

        def refuse(target: object, *args: object, **kwargs: object) -> int:
            if str(target) == str(path):
                raise PermissionError(13, "Permission denied")
            return real_open(target, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(os, "open", refuse)
    with pytest.raises(ManifestError, match=r"is not readable \(Permission denied\)"):
        load_manifest(path)


# --- verify_file: where the library really is ---------------------------------------------


def test_verify_refuses_a_symlink_out_of_the_package(package: Path, tmp_path_factory: Any) -> None:
    outside = tmp_path_factory.mktemp("outside") / "libx.so"
    outside.write_bytes(PAYLOAD)
    (package / "libs" / "libx.so").unlink()
    (package / "libs" / "libx.so").symlink_to(outside)
    with pytest.raises(ManifestError, match="leads outside the package directory"):
        verify_file(_entry(), package)


def test_verify_follows_a_symlink_inside_the_package(package: Path) -> None:
    (package / "libs" / "libx.so").rename(package / "libs" / "real.so")
    (package / "libs" / "libx.so").symlink_to("real.so")
    assert verify_file(_entry(), package) == package / "libs" / "libx.so"


def test_verify_refuses_a_directory(package: Path) -> None:
    (package / "libs" / "libx.so").unlink()
    (package / "libs" / "libx.so").mkdir()
    with pytest.raises(ManifestError, match="is a directory, not a regular file"):
        verify_file(_entry(), package)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_verify_refuses_a_fifo_without_blocking(package: Path) -> None:
    (package / "libs" / "libx.so").unlink()
    os.mkfifo(package / "libs" / "libx.so")
    with pytest.raises(ManifestError, match="is a FIFO, not a regular file"):
        verify_file(_entry(), package)


def test_verify_refuses_an_unreadable_library(
    package: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    library = package / "libs" / "libx.so"
    real_open = os.open

    # The same for every uid (root reads mode 000): fail the open as it would for others.
    def refuse(target: object, *args: object, **kwargs: object) -> int:
        if str(target) == str(library):
            raise PermissionError(13, "Permission denied")
        return real_open(target, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", refuse)
    with pytest.raises(ManifestError, match=r"is not readable \(Permission denied\); reinstall"):
        verify_file(_entry(), package)


def test_verify_message_shortens_a_long_file_name(package: Path) -> None:
    with pytest.raises(ManifestError) as info:
        verify_file(_entry(file="libs/" + "b" * 250), package)
    assert len(str(info.value)) < 300
    assert "(255 characters)" in str(info.value)


# --- the optional cell id (written by `nox -s build`, read by the developer tools) -------


def test_the_cell_id_round_trips(tmp_path: Path) -> None:
    entry = _entry(cell="linux_x86_64-t26_cuda_abi0")
    write_manifest(tmp_path / "manifest.json", [entry])
    (loaded,) = load_manifest(tmp_path / "manifest.json")
    assert loaded == entry
    assert loaded.cell == "linux_x86_64-t26_cuda_abi0"


def test_a_manifest_without_cell_ids_still_reads(tmp_path: Path) -> None:
    # Manifests written before cell ids, and those of source builds and the JIT (which
    # build no matrix cell): the same bytes as before, read as they were.
    data = json.loads(dump_manifest([_entry()]))
    assert set(data["libraries"][0]) == set(REQUIRED_FIELDS)
    assert data["schema"] == 1
    (loaded,) = load_manifest(with_entry(tmp_path))
    assert loaded.cell is None
    assert loaded == _entry()


@pytest.mark.parametrize("value", [None, 7, True, [], {}, "", "a\x00b", "x" * 300])
def test_a_cell_value_that_is_not_plain_text_reads_as_absent(tmp_path: Path, value: object) -> None:
    # The selector never reads `cell`: a value it could not use is no reason to refuse
    # the manifest (the runtime's fast path skips the field and must agree).
    (loaded,) = load_manifest(with_entry(tmp_path, cell=value))
    assert loaded.cell is None
    assert loaded == _entry()


# Issue 30: the torch-agnostic entry of the portable library.
PORTABLE_FIELDS = {
    "torch": "any",
    "torch_build": "any",
    "backend": "any",
    "cxx11_abi": None,
    "gpu_toolkit": None,
}


def test_a_portable_entry_is_accepted_and_round_trips(tmp_path: Path) -> None:
    path = with_entry(tmp_path, **PORTABLE_FIELDS, python="abi3")
    (entry,) = load_manifest(path)
    assert entry.portable
    assert (entry.torch, entry.torch_build, entry.backend) == ("any", "any", None)
    assert {k: entry.to_json()[k] for k in PORTABLE_FIELDS} == PORTABLE_FIELDS
    write_manifest(tmp_path / "again.json", [entry])
    assert load_manifest(tmp_path / "again.json") == (entry,)


@pytest.mark.parametrize("python", ["abi3", "abi3.12", "3.14t", "3.13t"])
def test_a_portable_entry_of_each_python_abi(tmp_path: Path, python: str) -> None:
    (entry,) = load_manifest(with_entry(tmp_path, **PORTABLE_FIELDS, python=python))
    assert entry.python == python


@pytest.mark.parametrize(
    "mix",
    [
        {"torch": "any"},
        {"backend": "any"},
        {"torch_build": "any"},
        {"torch": "any", "backend": "any"},
        {**PORTABLE_FIELDS, "cxx11_abi": False},
        {**PORTABLE_FIELDS, "gpu_toolkit": "12.8"},
        {**PORTABLE_FIELDS, "torch": "2.8"},
        {**PORTABLE_FIELDS, "backend": "cpu"},
        {**PORTABLE_FIELDS, "torch_build": "2.8.0"},
    ],
    ids=str,
)
def test_a_mixed_any_entry_is_refused(tmp_path: Path, mix: dict[str, object]) -> None:
    """'any' only together: a native entry must name its torch and backend, and a
    portable one claims nothing torch-specific. The whole manifest is refused, as for any
    bad entry."""
    with pytest.raises(ManifestError, match=r"mixes a torch-agnostic library's 'any'|expected"):
        load_manifest(with_entry(tmp_path, **mix))
