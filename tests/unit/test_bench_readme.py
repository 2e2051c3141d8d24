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


def test_the_runtimes_cost_figures_are_the_committed_benchmarks() -> None:
    """``PORTABLE_COST`` (what status() and the diagnostics print) is the medians of the
    committed results: the native library from exchange.json, the shipped abi3 portable
    build from portable.json. A benchmark run that moves them fails here until copied."""
    from torch_c_dlpack_ext._decide import PORTABLE_COST

    results = ROOT / "benchmarks" / "results"
    native = read_result(results / "exchange.json")["data"]["current"]["providers"]["ours"]
    portable = read_result(results / "portable.json")["data"]["providers"]
    shipped = portable["portable abi3 (3.9, as shipped)"]
    measured = {
        "native_export_ns": native["from_py_object"]["median"],
        "native_allocator_ns": native["allocator"]["median"],
        "portable_export_ns": shipped["from_py_object"]["median"],
        "portable_allocator_ns": shipped["allocator"]["median"],
    }
    # The figures are printed rounded to what a reader can use: within 1% (or 1 ns).
    for name, value in measured.items():
        assert abs(PORTABLE_COST[name] - value) <= max(1.0, value / 100), (
            f"PORTABLE_COST[{name!r}] is {PORTABLE_COST[name]}, the benchmark says "
            f"{value:.0f}: copy it from benchmarks/results into _decide.py"
        )
