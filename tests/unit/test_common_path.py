"""The import's common path (``_loader.load_common``, one module) restates a few
facts of the core so that it imports none of the core's modules: the names, the manifest
schema's checks and bounds, the torch version's reading, the selector's choice. Each is
pinned here to its source, so the common path accepts exactly what the core accepts and
picks what the selector picks (anything else goes to the full selector, which explains).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import types
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _torch_c_dlpack_ext_core import dlpack_ctypes, files, manifest, naming
from _torch_c_dlpack_ext_core.errors import ConfigError, ManifestError
from _torch_c_dlpack_ext_core.files import write_manifest
from _torch_c_dlpack_ext_core.manifest import ManifestEntry
from torch_c_dlpack_ext import _loader
from torch_c_dlpack_ext._decide import DecisionKind, Settings, decide
from torch_c_dlpack_ext._torchinfo import describe_torch


def test_names_are_the_cores() -> None:
    assert _loader.CAPSULE_ATTR == naming.CAPSULE_ATTR
    assert _loader.LEGACY_INT_ATTR == naming.LEGACY_INT_ATTR
    assert _loader.CAPSULE_NAME == naming.CAPSULE_NAME == dlpack_ctypes.CAPSULE_NAME
    assert _loader.ENV_PREFIX == naming.ENV_PREFIX
    assert naming.MANIFEST_NAME == _loader._MANIFEST_NAME
    assert tuple(b.value for b in naming.NATIVE_BACKENDS) == _loader._BACKENDS
    assert _loader._ANY == naming.ANY == manifest.ANY


def test_schema_bounds_are_the_manifests() -> None:
    """One value each: the loader's most a library may be is the manifest's."""
    assert _loader.MAX_LIBRARY_BYTES == manifest.MAX_LIBRARY_BYTES
    assert manifest.MAX_MANIFEST_BYTES == _loader._MAX_MANIFEST_BYTES
    assert manifest.MAX_ENTRIES == _loader._MAX_ENTRIES
    assert manifest.MAX_TEXT == _loader._MAX_TEXT
    assert manifest.MAX_FILE_PATH == _loader._MAX_FILE_PATH
    assert manifest.SCHEMA_VERSION == _loader._SCHEMA_VERSION
    # The entry check reads every field, the six text fields first.
    assert sorted(_loader._ENTRY_COLUMNS) == sorted(manifest.REQUIRED_FIELDS)
    assert set(_loader._ENTRY_COLUMNS[:6]) == set(manifest.REQUIRED_FIELDS) - {
        "file",
        "backend",
        "cxx11_abi",
        "gpu_toolkit",
        "size",
        "sha256",
    }
    assert _loader.SUPPORTED_MAJOR == dlpack_ctypes.SUPPORTED_MAJOR


VERSIONS = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["2.8.0", "2.8.0a0+abc", " 2.6.0+cu124", "2.10", "2.", ".8", "2.x", "٣.٨.0"]),
    st.from_regex(r"\A[0-9]{1,11}\.[0-9]{0,11}[a-z+.0-9]{0,5}\Z"),
)


@given(VERSIONS)
def test_torch_minor_reads_what_naming_reads(version: str) -> None:
    try:
        expected: tuple[int, int] | None = naming.torch_minor(version)
    except ConfigError:
        expected = None
    assert _loader.torch_minor_of(version) == expected


def _valid_entry_json(**change: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "file": "libs/libtorch_c_dlpack_ext-torch2.8-cuda-cxx11abi1.so",
        "torch": "2.8",
        "torch_build": "2.8.0+cu128",
        "backend": "cuda",
        "cxx11_abi": True,
        "dlpack": "1.3",
        "toolchain": "g++ 12.2.0",
        "gpu_toolkit": "12.8",
        "platform": "linux_x86_64",
        "python": "abi3",
        "size": 64152,
        "sha256": "a" * 64,
    }
    data.update(change)
    return data


FIELD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=2**33),
    st.sampled_from([2**32, 2**32 + 1, 1.0, 0, "", " ", "\x00", "a" * 257, "a" * 256]),
    st.sampled_from(["2.8", "2.08", "2.8.1", "٣.٨", "2", "abi3", "3.14t", "3.14", "3.x", "t"]),
    st.sampled_from(["cpu", "cuda", "rocm", "CUDA", "libs/x.so", "../x.so", "/abs.so", "a//b"]),
    st.sampled_from(["any", "xpu", "abi3.12", "abi3.9", "abi3.12t", "abi3.", "3.13t"]),
    st.sampled_from(["a\\b", "c:x", "./x", "a/" + "b" * 256, "x" * 513, "A" * 64, "0" * 63]),
    st.text(max_size=8),
    st.lists(st.integers(), max_size=2),
)


@st.composite
def manifests(draw: st.DrawFn) -> bytes:
    entries: list[Any] = [_valid_entry_json(), _valid_entry_json(file="libs/b.so", backend="cpu")]
    # The portable library's torch-agnostic entry (issue 30), which the draws below mix up.
    entries.append(
        _valid_entry_json(
            file="libs/p.so",
            torch="any",
            torch_build="any",
            backend="any",
            cxx11_abi=None,
            gpu_toolkit=None,
            python=draw(st.sampled_from(["abi3", "abi3.12", "3.14t"])),
        )
    )
    if draw(st.booleans()):
        entries = entries[2:] if draw(st.booleans()) else entries[:2]
    for _ in range(draw(st.integers(0, 3))):
        index = draw(st.integers(0, len(entries) - 1))
        name = draw(st.sampled_from(ManifestEntry._fields))
        if draw(st.booleans()):
            entries[index][name] = draw(FIELD_VALUES)
        else:
            entries[index].pop(name, None)
    if draw(st.integers(0, 9)) == 0:
        entries.append(draw(FIELD_VALUES))
    top: Any = {"schema": 1, "libraries": entries, "extra": "ignored"}
    how = draw(st.sampled_from(["ok"] * 6 + ["schema", "libraries", "top", "bytes", "blank"]))
    if how == "schema":
        top["schema"] = draw(st.sampled_from([True, 1.0, "1", 2, None, 0]))
    elif how == "libraries":
        top["libraries"] = draw(FIELD_VALUES)
    elif how == "top":
        top = draw(FIELD_VALUES)
    raw = json.dumps(top).encode()
    if how == "bytes":
        raw = draw(st.sampled_from([b"\xff" + raw, b"\xef\xbb\xbf" + raw, raw[:-1], raw + b"x"]))
    elif how == "blank":
        raw = b"  \n"
    return raw


@settings(max_examples=400, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=manifests())
def test_the_common_path_accepts_exactly_the_manifests_the_core_accepts(
    raw: bytes, tmp_path: Path
) -> None:
    path = tmp_path / "manifest.json"
    path.write_bytes(raw)
    try:
        expected: list[dict[str, Any]] | None = [
            entry.to_json() for entry in files.load_manifest(path)
        ]
    except ManifestError:
        expected = None
    fast = _loader._read_manifest(path)
    if expected is None:
        assert fast is None, raw[:300]
    else:
        assert fast is not None, raw[:300]
        # The fields the common path reads; ``cell`` (optional, for the developer tools)
        # it never reads, and the core never refuses a manifest for it.
        fields = manifest.REQUIRED_FIELDS
        assert [{k: e[k] for k in fields} for e in fast] == [
            {k: e[k] for k in fields} for e in expected
        ]


@pytest.mark.parametrize(
    ("field", "first", "second"),
    [
        ("cxx11_abi", True, 1),
        ("cxx11_abi", False, 0),
        ("size", 1, True),
        ("size", 64152, 64152.0),
        ("torch", "2.8", 2.8),
        ("gpu_toolkit", None, 0),
    ],
)
def test_values_that_compare_equal_across_types_are_told_apart(
    tmp_path: Path, field: str, first: object, second: object
) -> None:
    """The entry check looks at distinct values; 1, 1.0 and True are one value to a set,
    and only one of them is valid, so the second entry's must still be refused."""
    path = tmp_path / "manifest.json"
    entries = [_valid_entry_json(**{field: first}), _valid_entry_json(**{field: second})]
    path.write_text(json.dumps({"schema": 1, "libraries": entries}), encoding="utf-8")
    with pytest.raises(ManifestError):
        files.load_manifest(path)
    assert _loader._read_manifest(path) is None


def test_a_manifest_that_is_not_a_regular_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "huge").write_bytes(b" " * (manifest.MAX_MANIFEST_BYTES + 1))
    for name in ("dir", "fifo", "missing", "huge"):
        assert _loader._read_manifest(tmp_path / name) is None, name


LIBRARY = b"\x7fELF" + bytes(200)


def _layout(root: Path, state: str) -> dict[str, Any]:
    """A package with one library in ``state``; the manifest entry (JSON) for it."""
    package = root / "pkg"
    (package / "libs").mkdir(parents=True)
    target = package / "libs" / "lib.so"
    entry = _valid_entry_json(
        file="libs/lib.so", size=len(LIBRARY), sha256=hashlib.sha256(LIBRARY).hexdigest()
    )
    if state == "regular":
        target.write_bytes(LIBRARY)
    elif state == "truncated":
        target.write_bytes(LIBRARY[:100])
    elif state == "grown":
        target.write_bytes(LIBRARY + b"x")
    elif state == "same_size":
        target.write_bytes(bytes(len(LIBRARY)))
    elif state == "directory":
        target.mkdir()
    elif state == "fifo":
        os.mkfifo(target)
    elif state == "symlink_inside":
        (package / "libs" / "real.so").write_bytes(LIBRARY)
        target.symlink_to("real.so")
    elif state == "symlink_out":
        (root / "outside.so").write_bytes(LIBRARY)
        target.symlink_to(root / "outside.so")
    elif state in ("linked_dir_inside", "linked_dir_out"):
        real = package / "real" if state == "linked_dir_inside" else root / "real"
        real.mkdir()
        (real / "lib.so").write_bytes(LIBRARY)
        (package / "libs").rmdir()
        (package / "libs").symlink_to(real)
    return entry


@pytest.mark.parametrize(
    "state",
    [
        "regular",
        "missing",
        "truncated",
        "grown",
        "same_size",
        "directory",
        "fifo",
        "symlink_inside",
        "symlink_out",
        "linked_dir_inside",
        "linked_dir_out",
    ],
)
def test_the_common_path_verifies_a_library_as_the_core_does(tmp_path: Path, state: str) -> None:
    entry = _layout(tmp_path, state)
    package = tmp_path / "pkg"
    try:
        expected: tuple[Path, bytes] | None = files.read_verified(
            ManifestEntry.from_json(entry), package
        )
    except ManifestError:
        expected = None
    fast = _loader._read_verified(entry, str(package))
    inside_links = ("symlink_inside", "linked_dir_inside")
    assert (expected is not None) is (state in ("regular", *inside_links))
    if state in inside_links:
        # The core accepts a link that stays inside the package; the common path proves
        # "inside" without resolving paths, so it leaves any link to the full selector.
        assert fast is None
    else:
        assert (fast is None) == (expected is None)
        if fast is not None and expected is not None:
            assert (Path(fast[0]), fast[1]) == expected


# The selector's choice, compared with the common path's, on one manifest holding every
# kind of neighbour: other minor, backend, ABI, and two builds of one cell.
CELLS = [
    ("2.8", "cuda", True, "2.8.0+cu128", "b-cuda"),
    ("2.8", "cuda", True, "2.8.0+cu126", "a-cuda-other-build"),
    ("2.8", "cpu", True, "2.8.0+cpu", "cpu"),
    ("2.8", "rocm", True, "2.8.0+rocm6.3", "rocm"),
    ("2.8", "cuda", False, "2.8.0+cu128", "cuda-abi0"),
    ("2.6", "cuda", False, "2.6.0+cu124", "old"),
]
TORCHES = [
    ("2.8.0+cu128", "12.8", None, True),
    ("2.8.0+cu126", "12.6", None, True),
    ("2.8.0a0+abc", "12.8", None, True),
    ("2.8.0+cpu", None, None, True),
    ("2.8.0+rocm6.3", None, "6.3", True),
    ("2.8.0+rocm6.3", "12.8", "6.3", True),  # hip decides even beside cuda
    ("2.8.0+cu128", "12.8", None, False),
    ("2.6.0+cu124", "12.4", None, False),
    ("2.6.0+cu124", "12.4", None, True),
    ("2.7.0", None, None, True),
]


#: The torch-agnostic portable library, beside the native cells (issue 30), of each
#: Python ABI a combined wheel or a build folder may hold.
PORTABLE_CELLS = [("abi3", "portable"), ("3.14t", "portable-cp314t"), ("abi3.12", "p312")]


def _write_package(
    tmp_path: Path,
    *,
    portable: bool,
    native: list[tuple[str, str, bool, str, str]] = CELLS,
    portable_cells: list[tuple[str, str]] = PORTABLE_CELLS,
) -> Path:
    entries = []
    cells = [(*cell, "abi3") for cell in native]
    if portable:
        cells += [("any", "any", None, "any", name, python) for python, name in portable_cells]
    for torch, backend, abi, build, name, python in cells:
        data = name.encode() * 10
        (tmp_path / "libs").mkdir(exist_ok=True)
        (tmp_path / "libs" / f"{name}.so").write_bytes(data)
        entries.append(
            ManifestEntry.from_json(
                _valid_entry_json(
                    file=f"libs/{name}.so",
                    torch=torch,
                    torch_build=build,
                    backend=backend,
                    cxx11_abi=abi,
                    size=len(data),
                    sha256=hashlib.sha256(data).hexdigest(),
                    python=python,
                    gpu_toolkit=None if torch == "any" else "12.8",
                )
            )
        )
    write_manifest(tmp_path / "manifest.json", entries)
    return tmp_path


@pytest.fixture
def package_dir(tmp_path: Path) -> Path:
    return _write_package(tmp_path, portable=False)


def _no_device_query() -> None:
    raise AssertionError("the common path asked a device")


def _fake_torch(
    version: str, cuda: str | None, hip: str | None, abi: bool, **more: Any
) -> types.SimpleNamespace:
    c = types.SimpleNamespace(_to_dlpack=print) if more.pop("to_dlpack", True) else object()
    return types.SimpleNamespace(
        __version__=version,
        version=types.SimpleNamespace(cuda=cuda, hip=hip, **more),
        compiled_with_cxx11_abi=lambda: abi,
        cuda=types.SimpleNamespace(is_available=_no_device_query),
        Tensor=type("Tensor", (), {}),
        _C=c,
    )


#: Torches no native cell serves, for the portable rows: older than the range, an XPU
#: torch (detected as XPU, never as CPU), one without torch._C._to_dlpack.
PORTABLE_TORCHES = [
    ("2.2.2+cu121", "12.1", None, False, {}),
    ("2.0.1", None, None, True, {}),
    ("2.8.0+xpu", None, None, True, {"xpu": "20250101"}),
    ("2.6.0+cu124", "12.4", None, True, {}),  # only an ABI-0 library of 2.6 is bundled
    ("2.2.2", None, None, True, {"to_dlpack": False}),
]


@pytest.mark.parametrize("portable", [False, True], ids=["native-only", "with-portable"])
@pytest.mark.parametrize(
    "described", [(*torch, {}) for torch in TORCHES] + PORTABLE_TORCHES, ids=str
)
def test_the_common_path_picks_what_the_selector_picks(
    tmp_path: Path, described: tuple[Any, ...], portable: bool
) -> None:
    package_dir = _write_package(tmp_path, portable=portable)
    *fields, more = described
    torch = _fake_torch(*fields, **more)
    decision = decide(
        describe_torch(torch),
        files.load_manifest(package_dir / "manifest.json"),
        Settings(),
    )
    kind, found = _loader._matching_library(torch, str(package_dir))
    if decision.kind in (DecisionKind.LOAD, DecisionKind.PORTABLE):
        assert decision.entry is not None
        assert found is not None, decision
        assert kind == decision.kind.value
        assert Path(found[0]) == package_dir / decision.entry.file
    else:
        assert found is None, (decision, found)


def _loader_calls(torch: types.SimpleNamespace, package_dir: Path) -> Counter[str]:
    """How many times each function of ``_loader`` runs while the common path picks and
    verifies ``package_dir``'s library for ``torch``."""
    calls: Counter[str] = Counter()
    source = Path(_loader.__file__)

    def profile(frame: types.FrameType, event: str, arg: object) -> None:
        if event == "call" and Path(frame.f_code.co_filename) == source:
            calls[frame.f_code.co_name] += 1

    sys.setprofile(profile)
    try:
        kind, found = _loader._matching_library(torch, str(package_dir))
    finally:
        sys.setprofile(None)
    assert (kind, found is not None) == ("load", True)
    return calls


def test_the_native_paths_python_calls_do_not_grow_with_the_manifest(tmp_path: Path) -> None:
    """Issue 36: each step of the native load path runs once, however many entries the
    manifest lists (a release's lists twenty-one, all checked on every import): the work
    per entry is done in C or in one loop, and the portable entry costs the native path
    no call (no Python-ABI parsing for "abi3" entries, no per-entry check of its own)."""
    torch = _fake_torch("2.8.0+cu128", "12.8", None, True)
    (tmp_path / "one").mkdir()
    (tmp_path / "release").mkdir()
    one = _write_package(tmp_path / "one", portable=False, native=CELLS[:1])
    # A combined abi3 wheel's manifest: its native libraries and the portable one.
    release = _write_package(tmp_path / "release", portable=True, portable_cells=PORTABLE_CELLS[:1])
    assert _loader_calls(torch, release) == _loader_calls(torch, one)


def test_an_xpu_torch_is_xpu_never_cpu() -> None:
    """Issue 30: an XPU torch was taken for a CPU build and given the CPU library."""
    torch = _fake_torch("2.8.0+xpu", None, None, True, xpu="20250101")
    assert _loader.backend_of(torch) == "xpu"
    assert describe_torch(torch).backend is naming.Backend.XPU


@given(
    st.one_of(
        st.text(max_size=10),
        st.sampled_from(
            [
                "abi3",
                "abi3.12",
                "abi3.9",
                "abi3.10",
                "abi3.100",
                "abi3.12t",
                "3.14t",
                "3.11",
                "3.13t",
                "3.14",
                "abi3.",
                "3.",
                "t",
                "3.1.4",
                "03.11",
                "3.011",
                "abi3.05",
            ]
        ),
    ),
    st.sampled_from([(3, 9), (3, 11), (3, 12), (3, 13), (3, 14), (3, 100)]),
    st.booleans(),
)
def test_python_serves_as_naming_says(value: str, version: tuple[int, int], ft: bool) -> None:
    assert _loader.python_serves(value, version, ft) is naming.python_serves(value, version, ft)


def test_the_interpreter_is_read_from_the_build() -> None:
    assert _loader.interpreter() == naming.running_python()


@pytest.mark.parametrize(("abiflags", "gil_disabled"), [("", 0), ("t", 1), ("td", 1), ("d", 0)])
def test_the_common_paths_abiflags_say_what_the_cores_sysconfig_says(
    monkeypatch: pytest.MonkeyPatch, abiflags: str, gil_disabled: int
) -> None:
    """``_loader`` reads the build's ``sys.abiflags`` (sysconfig costs ~1 ms on the common
    path); the core reads ``Py_GIL_DISABLED``. Both are fixed when CPython is built, and
    neither follows ``PYTHON_GIL``: for each build they agree."""
    import sysconfig

    monkeypatch.setattr(sys, "abiflags", abiflags, raising=False)
    monkeypatch.setattr(sys, "_is_gil_enabled", lambda: True, raising=False)  # PYTHON_GIL=1
    real = sysconfig.get_config_var
    monkeypatch.setattr(
        sysconfig,
        "get_config_var",
        lambda name: gil_disabled if name == "Py_GIL_DISABLED" else real(name),
    )
    assert _loader.interpreter() == naming.running_python()
    assert _loader.interpreter()[1] is bool(gil_disabled)


@pytest.mark.parametrize("cell", ["linux_x86_64-t28_cuda", 7, None, "x\x00"])
def test_the_common_path_ignores_the_cell_id(tmp_path: Path, cell: object) -> None:
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps({"schema": 1, "libraries": [_valid_entry_json(cell=cell)]}))
    fast = _loader._read_manifest(path)
    assert fast is not None
    (entry,) = files.load_manifest(path)
    assert entry.cell == (cell if cell == "linux_x86_64-t28_cuda" else None)
