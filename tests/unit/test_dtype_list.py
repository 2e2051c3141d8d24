"""The dtype list is written once, as the X-macro list of ``csrc/tcde_contract.h``, which
both tables compile (issue 42, item 2): the Python test tables that name dtypes must say
the same. A dtype added to the header and not to the suite's table (or the reverse), or a
code, width or lane count that differs, fails here."""

from __future__ import annotations

import re
from pathlib import Path

from tests.exchange_suite.cases import DLPACK_DTYPES, IMPORTED_AS
from tests.exchange_suite.dlpack_ctypes import DLDataTypeCode

HEADER = Path(__file__).resolve().parents[2] / "csrc" / "tcde_contract.h"

#: One row: X(torch name, c10::ScalarType, DLPack code, bits, lanes, flags).
_ROW = re.compile(
    r"X\((?P<name>\w+),\s*(?P<scalar>\w+),\s*(?P<code>kDL\w+),\s*(?P<bits>\d+),\s*"
    r"(?P<lanes>\d+),\s*(?P<flags>[^)]*)\)"
)


def header_dtypes() -> dict[str, tuple[int, int, int, frozenset[str]]]:
    """``{torch name: (code, bits, lanes, flags)}`` of every row of ``TCDE_DTYPES_*``."""
    text = HEADER.read_text(encoding="utf-8")
    rows: dict[str, tuple[int, int, int, frozenset[str]]] = {}
    for match in _ROW.finditer(text):
        name = match["name"]
        assert name not in rows, f"{name} is listed twice in {HEADER.name}"
        flags = frozenset(re.findall(r"kTcdeDtype(\w+)", match["flags"]))
        code = int(DLDataTypeCode[match["code"]])
        rows[name] = (code, int(match["bits"]), int(match["lanes"]), flags)
    return rows


def test_the_header_lists_dtypes() -> None:
    rows = header_dtypes()
    # Every group of the list is parsed (a later edit that breaks the pattern must not
    # make the comparison below vacuous).
    assert {"float32", "int7", "float8_e8m0fnu", "float4_e2m1fn_x2"} <= set(rows)
    assert len(rows) == 36


def test_suite_table_is_the_header_list() -> None:
    rows = header_dtypes()
    assert {name: row[:3] for name, row in rows.items()} == {
        name: (int(code), bits, lanes) for name, (code, bits, lanes) in DLPACK_DTYPES.items()
    }


def test_export_only_dtypes_are_the_suite_s_imported_as() -> None:
    """A dtype exported under another type's code (sub-byte ints) imports as that type:
    the header's ExportOnly flag and the suite's IMPORTED_AS name the same dtypes."""
    rows = header_dtypes()
    assert {name for name, row in rows.items() if "ExportOnly" in row[3]} == set(IMPORTED_AS)
