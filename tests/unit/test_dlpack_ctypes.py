"""The DLPack ctypes mirrors have one definition, usable without the package's selector."""

from __future__ import annotations

import ast
import ctypes
import inspect
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.helpers import CORE_SOURCE, PACKAGE_SOURCE, ROOT, run_python

from _torch_c_dlpack_ext_core import dlpack_ctypes as _dlpack_ctypes
from _torch_c_dlpack_ext_core.errors import LibraryLoadError, table_error
from torch_c_dlpack_ext import _loader, _torchinfo

MIRRORS = CORE_SOURCE / "dlpack_ctypes.py"


def test_mirrors_import_only_ctypes() -> None:
    """Imported inside old-torch envs and by the loader, the mirrors need nothing else."""
    imported = set()
    for node in ast.walk(ast.parse(MIRRORS.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add("." * node.level + (node.module or ""))
    assert imported == {"__future__", "ctypes"}, imported


def _structs(path: Path) -> list[ast.ClassDef]:
    return [
        node
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef)
        and any(ast.unparse(base) in {"ctypes.Structure", "Structure"} for base in node.bases)
    ]


def test_no_other_module_defines_dlpack_structs() -> None:
    """The loader and the diagnostics use the mirrors instead of copies of their own.

    Other modules may mirror non-DLPack C structs (``_capsule``'s ``Dl_info`` for
    ``dladdr``), never a DLPack one: no ``DL*`` struct and no name the mirrors define.
    """
    mirrored = {node.name for node in _structs(MIRRORS)}
    assert {"DLTensor", "DLManagedTensorVersioned", "DLPackExchangeAPI"} <= mirrored
    offenders = [
        f"{path.name}:{node.lineno} {node.name}"
        for path in sorted([*PACKAGE_SOURCE.glob("*.py"), *CORE_SOURCE.glob("*.py")])
        if path != MIRRORS
        for node in _structs(path)
        if node.name.lstrip("_") in mirrored or node.name.lstrip("_").startswith("DL")
    ]
    assert offenders == []
    # The one table check names a NULL member through the mirror (its error, made by
    # errors.table_error, reads the mirror's member names).
    assert "table_error" in inspect.getsource(_torchinfo.check_table)
    source = inspect.getsource(table_error)
    assert "from .dlpack_ctypes import EXCHANGE_API_MEMBERS, SUPPORTED_MAJOR" in source


def test_the_table_struct_is_the_mirrors_layout() -> None:
    """The import reads a table with one ``struct`` unpack (no ctypes type to create on the
    common path); it must read exactly the mirror's layout."""
    table_type = _dlpack_ctypes.DLPackExchangeAPI
    assert _loader._TABLE.size == ctypes.sizeof(table_type)
    first = getattr(table_type, _dlpack_ctypes.EXCHANGE_API_MEMBERS[0])
    assert first.offset == _loader.TABLE_HEADER_BYTES
    assert len(_dlpack_ctypes.EXCHANGE_API_MEMBERS) == _loader.TABLE_MEMBERS


@settings(max_examples=200)
@given(
    major=st.sampled_from([0, 1, 2, 2**32 - 1]),
    minor=st.integers(0, 2**32 - 1),
    null=st.sets(st.integers(0, 4)),
)
def test_the_table_check_agrees_with_the_mirror(major: int, minor: int, null: set[int]) -> None:
    """Differential: a table written through the mirror, read by the import's check."""
    table = _dlpack_ctypes.DLPackExchangeAPI()
    table.header.version.major, table.header.version.minor = major, minor
    keep = []
    for index, name in enumerate(_dlpack_ctypes.EXCHANGE_API_MEMBERS):
        if index not in null:
            field_type = type(getattr(table, name))
            function = field_type(lambda *args: 0)
            keep.append(function)
            setattr(table, name, function)
    address = ctypes.addressof(table)
    missing = [n for i, n in enumerate(_dlpack_ctypes.EXCHANGE_API_MEMBERS) if i in null]
    if major != 1:
        with pytest.raises(LibraryLoadError, match=f"DLPack version {major}\\.{minor}"):
            _loader.check_table(address, "t")
    elif missing:
        with pytest.raises(LibraryLoadError, match="NULL member") as caught:
            _loader.check_table(address, "t")
        assert all(name in str(caught.value) for name in missing)
    else:
        assert _loader.check_table(address, "t") == (1, minor)


def test_layout_of_dlpack_1_3_on_64_bit() -> None:
    if ctypes.sizeof(ctypes.c_void_p) != 8:
        pytest.skip("the sizes below are the 64-bit ones")
    assert ctypes.sizeof(_dlpack_ctypes.DLTensor) == 48
    assert ctypes.sizeof(_dlpack_ctypes.DLManagedTensorVersioned) == 80
    assert ctypes.sizeof(_dlpack_ctypes.DLPackExchangeAPI) == 56
    assert _dlpack_ctypes.EXCHANGE_API_MEMBERS == (
        "managed_tensor_allocator",
        "managed_tensor_from_py_object_no_sync",
        "managed_tensor_to_py_object_no_sync",
        "dltensor_from_py_object_no_sync",
        "current_work_stream",
    )
    # A NULL member reads as false, which is how the loader finds an incomplete table.
    assert not _dlpack_ctypes.DLPackExchangeAPI().current_work_stream


def test_suite_imports_the_mirrors_without_the_package() -> None:
    code = """
import json, sys
from tests.exchange_suite import dlpack_ctypes as dl
print(json.dumps({
    "package_imported": any(m.split(".")[0] == "torch_c_dlpack_ext" for m in sys.modules),
    "file": sys.modules[dl.DLPackExchangeAPI.__module__].__file__,
    "members": list(dl.ExchangeLibrary.member_names()),
}))
"""
    # The checkout's python/ on the path, as pytest's pythonpath puts it in an old-torch
    # env: importing the building blocks must not run the package's selector.
    proc = run_python(code, pythonpath=[ROOT, ROOT / "python"], timeout=120)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["package_imported"] is False
    assert report["file"] == str(MIRRORS)
    assert report["members"] == list(_dlpack_ctypes.EXCHANGE_API_MEMBERS)


def test_the_table_check_reads_the_mirrors_layout() -> None:
    """``_torchinfo.check_table`` reads the version and the members without the mirrors
    (the common import does not load them): its two numbers must be the mirrors' layout."""
    from torch_c_dlpack_ext import _torchinfo

    api, header = _dlpack_ctypes.DLPackExchangeAPI, _dlpack_ctypes.DLPackExchangeAPIHeader
    assert api.header.offset == 0
    assert header.version.offset == 0
    assert _dlpack_ctypes.DLPackVersion.major.offset == 0
    assert _dlpack_ctypes.DLPackVersion.minor.offset == 4
    assert ctypes.sizeof(header) == _torchinfo.TABLE_HEADER_BYTES
    assert len(_dlpack_ctypes.EXCHANGE_API_MEMBERS) == _torchinfo.TABLE_MEMBERS
    pointer = ctypes.sizeof(ctypes.c_void_p)
    for index, name in enumerate(_dlpack_ctypes.EXCHANGE_API_MEMBERS):
        assert getattr(api, name).offset == _torchinfo.TABLE_HEADER_BYTES + index * pointer
    assert ctypes.sizeof(api) == _torchinfo.TABLE_HEADER_BYTES + _torchinfo.TABLE_MEMBERS * pointer


def test_the_table_check_names_a_null_member() -> None:
    from _torch_c_dlpack_ext_core.errors import LibraryLoadError
    from torch_c_dlpack_ext import _torchinfo

    table = _dlpack_ctypes.DLPackExchangeAPI()
    table.header.version.major, table.header.version.minor = 1, 3
    keep = [_dlpack_ctypes.ALLOCATOR(lambda *a: 0), _dlpack_ctypes.FROM_PY_OBJECT(lambda *a: 0)]
    table.managed_tensor_allocator, table.managed_tensor_from_py_object_no_sync = keep
    with pytest.raises(LibraryLoadError, match="managed_tensor_to_py_object_no_sync"):
        _torchinfo.check_table(ctypes.addressof(table), "test")
    other = _dlpack_ctypes.DLPackExchangeAPI()
    other.header.version.major = 2
    with pytest.raises(LibraryLoadError, match=r"version 2\.0"):
        _torchinfo.check_table(ctypes.addressof(other), "test")
