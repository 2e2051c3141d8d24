"""The pages' figures are generated (``nox -s bench`` renders docs/benchmarks.md's tables
and README's per-call costs from ``benchmarks/results``) or not written at all: a
hand-typed size went stale ("60 kB" for 68-76 kB libraries), and so did times, disk sizes
and job counts in the runbooks, and results naming cells by a retired id form
(``cp311-linux_x86_64-t28_cpu``, before abi3 removed the CPython from cell ids)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from benchmarks.pages import PATHS_END, PATHS_START
from benchmarks.report import SECTION_END, SECTION_START
from devtools.matrix.reader import load_matrix
from devtools.testkit.footprint import BEGIN as FOOTPRINT_START
from devtools.testkit.footprint import END as FOOTPRINT_END

ROOT = Path(__file__).resolve().parents[2]
BENCH_PAGE = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
#: The pages whose prose must not type a measurement: the user's page, the runbooks and
#: CONTRIBUTING's top (its Quick start). docs/facts.md records dated, checked facts.
PAGES = sorted(
    [ROOT / "README.md", ROOT / "CONTRIBUTING.md"]
    + [page for page in (ROOT / "docs").glob("*.md") if page.name != "facts.md"]
)
#: Something that looks like a cell id: ``<platform>-t<major><minor>_<backend>...``.
CELL_ID = re.compile(r"\b(?:[a-z0-9_]+-)+t\d{2}_[a-z0-9_]+(?:-cp3\d+t)?\b")
#: Typed measurements: library sizes, disk sizes, durations in minutes or hours.
MEASURED = re.compile(
    r"\b\d+(?:\.\d+)? ?(?:kB|KiB|KB|GB)\b|~?\b\d+(?:[.-]\d+)? ?(?:minutes?|min|hours?)\b"
)


def _generated() -> str:
    start, end = BENCH_PAGE.index(SECTION_START), BENCH_PAGE.index(SECTION_END)
    return BENCH_PAGE[start:end].replace("\\_", "_")


def _prose(text: str) -> str:
    generated = (
        (SECTION_START, SECTION_END),
        (PATHS_START, PATHS_END),
        (FOOTPRINT_START, FOOTPRINT_END),
    )
    for start, end in generated:
        if start in text:
            text = text[: text.index(start)] + text[text.index(end) + len(end) :]
    if "\n## Layout" in text:  # CONTRIBUTING: only the top (Quick start, Runbooks)
        text = text[: text.index("\n## Layout")]
    return text


def test_the_generated_tables_name_current_cell_ids() -> None:
    current = {cell.id for cell in load_matrix().cells()}
    named = set(CELL_ID.findall(_generated()))
    stale = sorted(named - current)
    assert not stale, f"regenerate with `nox -s bench`: {stale}"


@pytest.mark.parametrize("page", PAGES, ids=[page.name for page in PAGES])
def test_the_prose_types_no_measurement(page: Path) -> None:
    # Sizes of our libraries and wheels live in the generated "size" tables; times and
    # disk use are dropped.
    typed = MEASURED.findall(_prose(page.read_text(encoding="utf-8")))
    assert typed == []
