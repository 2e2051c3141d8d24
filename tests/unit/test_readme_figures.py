"""README's figures are generated (``nox -s bench`` renders the benchmark section from
``benchmarks/results``) or not written at all: a hand-typed size went stale ("60 kB" for
68-76 kB libraries), and so did results naming cells by a retired id form
(``cp311-linux_x86_64-t28_cpu``, before abi3 removed the CPython from cell ids)."""

from __future__ import annotations

import re
from pathlib import Path

from devtools.matrix.reader import load_matrix

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
START, END = "<!-- benchmarks:start", "<!-- benchmarks:end -->"
#: Something that looks like a cell id: ``<platform>-t<major><minor>_<backend>...``.
CELL_ID = re.compile(r"\b(?:[a-z0-9_]+-)+t\d{2}_[a-z0-9_]+(?:-cp3\d+t)?\b")


def _generated() -> str:
    return README[README.index(START) : README.index(END)].replace("\\_", "_")


def _prose() -> str:
    return README[: README.index(START)] + README[README.index(END) :]


def test_the_generated_tables_name_current_cell_ids() -> None:
    current = {cell.id for cell in load_matrix().cells()}
    named = set(CELL_ID.findall(_generated()))
    stale = sorted(named - current)
    assert not stale, f"regenerate with `nox -s bench`: {stale}"


def test_the_prose_types_no_library_size() -> None:
    # Sizes of our libraries and wheels live in the generated "size" tables.
    typed = re.findall(r"\b\d+(?:\.\d+)? ?(?:kB|KiB|KB)\b", _prose())
    assert typed == []
