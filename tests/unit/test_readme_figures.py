"""The pages' figures are generated (``nox -s bench`` renders docs/benchmarks.md's tables
and README's per-call costs from ``benchmarks/results``, ``nox -s footprint`` the test
suite's from ``docs/footprint``) or marked as history: a hand-typed size went stale ("60
kB" for 68-76 kB libraries), and so did times, disk sizes, speed ratios and job counts in
the runbooks, and results naming cells by a retired id form (``cp311-linux_x86_64-t28_cpu``,
before abi3 removed the CPython from cell ids).

The convention, on every page (README, CHANGELOG, CONTRIBUTING, docs/**, ci.yml's
comments): a measured figure (GiB, GB, MiB, MB, KiB, kB, ms, µs/us, ns, minutes, hours,
a ratio written with ``x`` or the multiplication sign) may appear only

- inside a generated section: a cog block (``[[[cog`` ... ``[[[end]]]``,
  devtools/base/generated.py) or ``<!-- NAME:begin ... -->`` ... ``<!-- NAME:end -->``;
- in a dated CHANGELOG release entry (a heading carrying a date, ``## [0.1.5] -
  2026-11-30``), or under any heading carrying a date mark;
- in a paragraph (or a list item, or a comment block) carrying a date mark:
  ``(measured 2026-12-07, <machine>)`` or ``(checked 2026-12-07)``.

A limit or a setting is not a measurement: :data:`LIMITS` names the few that pages state.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from devtools.matrix.reader import load_matrix

ROOT = Path(__file__).resolve().parents[2]
BENCH_PAGE = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
#: Every page: README, CHANGELOG, CONTRIBUTING and docs/**, and ci.yml (its comments).
PAGES = sorted(
    [
        ROOT / "README.md",
        ROOT / "CHANGELOG.md",
        ROOT / "CONTRIBUTING.md",
        *(ROOT / "docs").rglob("*.md"),
        ROOT / ".github" / "workflows" / "ci.yml",
    ]
)
#: Something that looks like a cell id: ``<platform>-t<major><minor>_<backend>...``.
CELL_ID = re.compile(r"\b(?:[a-z0-9_]+-)+t\d{2}_[a-z0-9_]+(?:-cp3\d+t)?\b")
#: A typed measurement: a number (or range) with a unit of size, time or a ratio.
MEASURED = re.compile(
    r"(?<![\w.])~?\d+(?:[.,]\d+)?(?:\s?[-\u2013]\s?\d+(?:\.\d+)?)?\s?"
    r"(?:(?:GiB|GB|MiB|MB|KiB|kB|KB|ms|µs|us|ns|minutes?|min|hours?)\b|[\u00d7x](?!\w))"
)
#: The marks of history: on a line, a paragraph or a heading.
DATE_MARK = re.compile(r"\((?:[^()]*[,;] )?(?:measured|checked) \d{4}-\d{2}-\d{2}\b[^)]*\)")
#: A bound (``<= 0.85x``, a target or a limit) is no measurement.
BOUND = re.compile(r"(?:<=|>=|[<>\u2264\u2265])\s*$")
#: A CHANGELOG release heading with its date.
DATED_RELEASE = re.compile(r"^#+ \[?\d+\.\d+[^\n]*\b\d{4}-\d{2}-\d{2}\b")
GENERATED = re.compile(r"<!-- ([\w-]+):(?:begin|start)\b")
#: A cog block (devtools/base/generated.py): its code, then its output, to ``[[[end]]]``.
COG_START, COG_END = "[[[cog", "[[[end]]]"
COG_BLOCK = re.compile(r"\[\[\[cog.*?\[\[\[end\]\]\]", re.DOTALL)
#: Limits and settings the pages state (page, the phrase): not measurements.
LIMITS = {
    ("docs/building.md", "1.5 GiB per compile"),
    ("docs/gpu-check.md", "64 MiB"),
    ("docs/import.md", "at most 1 MiB"),
}


def _lines(page: Path) -> list[str]:
    """The page's lines; of ci.yml, its comments only (the rest are blank)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    if page.suffix != ".yml":
        return lines
    return [line.split("#", 1)[1] if "#" in line else "" for line in lines]


def unmarked_figures(page: Path) -> Iterator[tuple[int, str, str]]:
    """(line number, figure, line) of each measured figure outside a generated section,
    a dated release entry, a date-marked heading's section and a date-marked paragraph."""
    lines = _lines(page)
    marked_level: int | None = None
    generated: str | None = None
    paragraph: list[tuple[int, str]] = []

    def close() -> Iterator[tuple[int, str, str]]:
        text = "\n".join(line for _, line in paragraph)
        if not DATE_MARK.search(text):
            for number, line in paragraph:
                for figure in MEASURED.finditer(line):
                    if not BOUND.search(line[: figure.start()]):
                        yield number, figure.group(0), line
        paragraph.clear()

    for number, line in enumerate(lines, 1):
        if generated is not None:
            end = COG_END if generated == COG_START else f"<!-- {generated}:end"
            generated = None if end in line else generated
            continue
        if COG_START in line:
            yield from close()
            generated = None if COG_END in line else COG_START
            continue
        if (start := GENERATED.search(line)) is not None:
            yield from close()
            generated = start.group(1)
            continue
        heading = re.match(r"^(#+) ", line) if page.suffix == ".md" else None
        if heading:
            yield from close()
            level = len(heading.group(1))
            if marked_level is not None and level <= marked_level:
                marked_level = None
            if marked_level is None and (DATED_RELEASE.match(line) or DATE_MARK.search(line)):
                marked_level = level
        if marked_level is not None:
            continue
        if not line.strip() or re.match(r"^\s*[-*] ", line):
            yield from close()
        if line.strip():
            paragraph.append((number, line))
    yield from close()


def _generated() -> str:
    return "".join(m.group(0) for m in COG_BLOCK.finditer(BENCH_PAGE)).replace("\\_", "_")


def test_the_generated_tables_name_current_cell_ids() -> None:
    current = {cell.id for cell in load_matrix().cells()}
    named = set(CELL_ID.findall(_generated()))
    stale = sorted(named - current)
    assert not stale, f"regenerate with `nox -s bench`: {stale}"


@pytest.mark.parametrize("page", PAGES, ids=[page.relative_to(ROOT).as_posix() for page in PAGES])
def test_a_measured_figure_is_generated_or_marked_as_history(page: Path) -> None:
    where = page.relative_to(ROOT).as_posix()
    typed = [
        f"{where}:{number}: {figure!r} in {line.strip()[:100]!r}"
        for number, figure, line in unmarked_figures(page)
        if not any(where == p and phrase in line for p, phrase in LIMITS)
    ]
    assert typed == [], "generate it, or mark it (measured YYYY-MM-DD, machine)"


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("The import takes 1.4 ms on torch 2.8.", ["1.4 ms"]),
        ("allocator 0.37x, from_py_object 0.44-0.71x", ["0.37x", "0.44-0.71x"]),
        ("a ratio of 2.2\u00d7 and 80 µs, 5 ns, 3 us", ["2.2\u00d7", "80 µs", "5 ns", "3 us"]),
        (
            "sizes: 14 GiB, 3 GB, 64 MiB, 2 MB, 23 KiB",
            ["14 GiB", "3 GB", "64 MiB", "2 MB", "23 KiB"],
        ),
        ("it ran (15-30 min) of CI's 90 minutes", ["15-30 min", "90 minutes"]),
        ("x86_64, 0x7f, py3.11, cu128, 3 cores", []),
        ("targets: export <= 0.7x, defer \u2264 3x, and 0.4x", ["0.4x"]),
        ("a section (issue 38, checked 2026-12-04): 7 GiB", []),
        ("The import takes 1.4 ms (measured 2026-12-02, AMD EPYC 2-core).", []),
        ("- first item 1 ms\n  (checked 2026-12-04)\n- second 2 ms", ["2 ms"]),
        ("## A (checked 2026-12-04)\n3 ms\n### below it 4 ms\n## B\n5 ms", ["5 ms"]),
        ("## [0.1.5] - 2026-11-30\n0.4x\n## [0.2.0] - Unreleased\n0.5x", ["0.5x"]),
        ("<!-- t:begin -->\n7 ms\n<!-- t:end -->\n8 ms", ["8 ms"]),
    ],
)
def test_the_figure_check_finds_what_is_unmarked(
    tmp_path: Path, text: str, found: list[str]
) -> None:
    page = tmp_path / "page.md"
    page.write_text(text + "\n", encoding="utf-8")
    assert [figure for _, figure, _ in unmarked_figures(page)] == found


def test_ci_yml_comments_are_checked_and_its_keys_are_not(tmp_path: Path) -> None:
    page = tmp_path / "ci.yml"
    page.write_text("# a runner leaves ~14 GiB free\ntimeout-minutes: 90 # 90 min\n")
    assert [figure for _, figure, _ in unmarked_figures(page)] == ["~14 GiB", "90 min"]
