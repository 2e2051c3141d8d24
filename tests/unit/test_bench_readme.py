"""The README's benchmark section is generated from benchmarks/results: no drift."""

from __future__ import annotations

from pathlib import Path

from benchmarks.cli import KINDS
from benchmarks.report import README_END, README_START, read_result, render_readme_section

ROOT = Path(__file__).resolve().parents[2]


def test_committed_readme_section_matches_committed_results() -> None:
    """The README's table is generated: it must not drift from benchmarks/results."""
    results = ROOT / "benchmarks" / "results"
    documents = [
        read_result(results / f"{kind}.json")
        for kind in KINDS
        if (results / f"{kind}.json").is_file()
    ]
    assert documents, "benchmarks/results/ holds no result; run `nox -s bench`"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start = readme.index(README_START)
    end = readme.index(README_END) + len(README_END)
    assert readme[start:end] == render_readme_section(documents), (
        "README.md's benchmark section differs from benchmarks/results; "
        "run `nox -s bench -- --write-readme` (or python -m benchmarks --only ... --write-readme)"
    )
